"""Build the rollout engine named by ``engine.name``, and a model loaded to sample from (:func:`load_policy`)."""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from transformers import PreTrainedModel

from tsctl.config.errors import ConfigError
from tsctl.config.registry import Registry
from tsctl.config.schema import EngineConfig, TsctlConfig
from tsctl.engines import vllm_logs, vllm_platform, vllm_sizing
from tsctl.engines.base import Demand, Engine
from tsctl.models import precision
from tsctl.models.loading import load_model
from tsctl.models.prompt_fit import needed_context
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.registry import build_task

@dataclass(frozen=True)
class EngineBuild:
    """What an engine builder gets: the engine config and the model it samples.

    Attributes:
        cfg: the engine config (name, batch size, vLLM memory, length, dtype, sleep mode, tensor parallelism).
        model: the policy; ``hf`` samples with this very object, ``vllm`` loads ``model_path`` (and is sized by
            :mod:`tsctl.engines.vllm_sizing` within the model's context).
        end_ids: the tokens that end a sample (``PromptFormatter.end_ids``).
        pad_id: token used for padding.
        model_path: folder holding the model's ``save_pretrained`` files (an engine that loads its own copy needs it).
        seed: the engine's sampling seed (``hf`` reseeds per call from the sampling params instead).
        compute_dtype: the in-process engine's autocast dtype (``model.compute_dtype`` resolved); None
            computes in the parameters' dtype.
        demand: what the command will ask of the engine, computed when an engine that is sized by it is built
            (``vllm``); None: unknown (the model's context, ``engine.batch_size`` sequences).
        log_dir: where an engine with a log of its own writes it (``vllm``); None: the system's temporary folder.
    """

    cfg: EngineConfig
    model: PreTrainedModel
    end_ids: tuple[int, ...]
    pad_id: int
    model_path: str | None = None
    seed: int = 0
    compute_dtype: torch.dtype | None = None
    demand: Callable[[], Demand] | None = None
    log_dir: Path | None = None


def _no_check(cfg: Any) -> None:
    """An engine that refuses no setting."""


ENGINES: Registry[Callable[[EngineBuild], Engine]] = Registry(
    "engine", __package__, check=_no_check, runs_here=_no_check, in_process=False, own_logprobs=False, reads=(),
)
"""Engine builders by ``engine.name``, from any module of :mod:`tsctl.engines`. Each declares ``check`` (the
composed :class:`TsctlConfig`'s settings it refuses, raising ConfigError), ``runs_here`` (its
:class:`EngineConfig` settings this machine cannot run, asked before any run folder is made),
``in_process`` (it samples the model object it is given: the engine of older snapshots, seed models and
warm-up scoring), ``own_logprobs`` (its log-probs may stand for the trainer's, ``trainer.old_logprobs=engine``) and
``reads`` (the ``engine.*`` keys of its own, beside the sampling settings and ``batch_size`` every engine reads)."""

VLLM_KEYS = ("gpu_memory_utilization", "tensor_parallel_size", "dtype", "max_model_len", "enable_sleep_mode", "enforce_eager")
"""The ``engine.*`` keys only the vllm engine reads."""


@ENGINES.register("hf", in_process=True, own_logprobs=True)
def _build_hf(build: EngineBuild) -> Engine:
    from tsctl.engines.hf import HFEngine

    return HFEngine(build.model, build.end_ids, pad_id=build.pad_id, batch_size=build.cfg.batch_size, compute_dtype=build.compute_dtype)


def _check_vllm(cfg: TsctlConfig) -> None:
    """vLLM's torchrun rule: one tensor-parallel-1 engine per rank."""
    from tsctl.distributed.world import from_env
    from tsctl.engines.vllm import torchrun_settings

    try:
        torchrun_settings(cfg.engine.tensor_parallel_size, from_env())
    except ValueError as err:
        raise ConfigError("engine.tensor_parallel_size", str(err)) from None


@ENGINES.register("vllm", check=_check_vllm, runs_here=vllm_platform.check_runs_here, reads=VLLM_KEYS)
def _build_vllm(build: EngineBuild) -> Engine:
    from tsctl.engines.vllm import VLLMEngine

    cfg, model = build.cfg, build.model
    vllm_platform.check_runs_here(cfg)
    if build.model_path is None:
        raise ValueError("the vllm engine loads the model from a folder: pass model_path (a save_pretrained folder)")
    dtype = vllm_platform.dtype(cfg)
    size = vllm_sizing.size(cfg, model, dtype, build.demand() if build.demand else Demand(), vllm_platform.free_memory())
    log = vllm_logs.open_log(build.log_dir or Path(tempfile.gettempdir()), tied_head=bool(getattr(model.config, "tie_word_embeddings", False)))
    with vllm_logs.starting(log):  # the first import of vLLM
        vllm_platform.check_model_runs_here(model.config)
    return VLLMEngine(
        build.model_path, build.end_ids, dtype=dtype, seed=build.seed, gpu_memory_utilization=cfg.gpu_memory_utilization,
        tensor_parallel_size=cfg.tensor_parallel_size, max_model_len=size.max_model_len, max_num_seqs=size.max_num_seqs,
        enable_sleep_mode=vllm_platform.sleep_mode(cfg), enforce_eager=cfg.enforce_eager, kv_cache_bytes=size.kv_cache_bytes, log=log,
    )


def build_engine(
    cfg: EngineConfig, model: PreTrainedModel, end_ids: int | Sequence[int], pad_id: int, model_path: str | None = None, seed: int = 0,
    compute_dtype: torch.dtype | None = None, demand: Callable[[], Demand] | None = None, log_dir: Path | None = None,
) -> Engine:
    """Build the engine ``cfg.name`` for ``model`` (the arguments are :class:`EngineBuild`'s; ``end_ids`` may be one token)."""
    ends = (end_ids,) if isinstance(end_ids, int) else tuple(end_ids)
    return ENGINES.get(cfg.name)(EngineBuild(cfg, model, ends, pad_id, model_path, seed, compute_dtype, demand, log_dir))


def logs_dir(cfg: TsctlConfig) -> Path:
    """Where an engine's own log goes: ``<runs_dir>/_logs``."""
    return Path(cfg.runs_dir) / "_logs"


def task_demand(cfg: TsctlConfig, formatter: PromptFormatter) -> Demand:
    """What sampling ``cfg``'s task asks, when the command knows no more: room for its longest train or held-out prompt
    (and the token after a seed that takes the whole budget); the number of requests unknown."""
    task = build_task(cfg.task)
    problems = [*task.problems("train"), *task.problems("heldout")]
    return Demand(context=needed_context(problems, formatter, cfg.engine.max_new_tokens, seeded=True))


def in_process(cfg: EngineConfig) -> EngineConfig:
    """``cfg`` with the first registered engine that samples the model object it is given (``hf``)."""
    return dataclasses.replace(cfg, name=next(n for n in ENGINES.names() if ENGINES.needs(n).in_process))


def unread_keys(cfg: EngineConfig) -> list[str]:
    """The ``engine.*`` keys other engines read and ``cfg.name`` does not (shown beside ``--cfg job``)."""
    own = set(ENGINES.needs(cfg.name).reads)
    others = {key for name in ENGINES.names() for key in ENGINES.needs(name).reads}
    return [f"engine.{key}" for key in sorted(others - own)]


def check_runs_here(cfg: EngineConfig) -> None:
    """Refuse, in one line, an engine setting this machine cannot run (the engine's declared ``runs_here``)."""
    ENGINES.needs(cfg.name).runs_here(cfg)


@dataclass
class Policy:
    """A model to sample from: the model (eval mode), its prompt formatter and an engine over it."""

    model: PreTrainedModel
    formatter: PromptFormatter
    engine: Engine


def load_policy(cfg: TsctlConfig, path: str, key: str = "model.path", demand: Callable[[PromptFormatter], Demand] | None = None) -> Policy:
    """The model at ``path`` (``model.dtype`` on ``model.device``, eval mode) with its formatter and an
    ``engine.name`` engine seeded with ``seed``, computing in ``model.compute_dtype``.

    ``key`` is the setting that named ``path`` (quoted in load errors); ``demand`` says, from the formatter, what the
    command will ask of the engine (default: :func:`task_demand`).
    """
    model, tokenizer = load_model(path, cfg.model.dtype, cfg.model.device, key=key)
    model.eval()
    formatter = PromptFormatter(tokenizer, cfg.model.use_chat_template, model.generation_config)
    asks = demand or (lambda f: task_demand(cfg, f))
    engine = build_engine(
        cfg.engine, model, formatter.end_ids, formatter.pad_id, str(path), seed=cfg.seed, compute_dtype=precision.compute_dtype(cfg, model),
        demand=lambda: asks(formatter), log_dir=logs_dir(cfg),
    )
    return Policy(model, formatter, engine)
