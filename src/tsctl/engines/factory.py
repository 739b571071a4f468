"""Build the rollout engine named by ``engine.name``, and a model loaded to sample from (:func:`load_policy`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from transformers import PreTrainedModel

from tsctl.config.errors import ConfigError
from tsctl.config.registry import Registry
from tsctl.config.schema import EngineConfig, TsctlConfig
from tsctl.engines import vllm_platform
from tsctl.engines.base import Engine
from tsctl.models import precision
from tsctl.models.loading import load_model
from tsctl.models.prompts import PromptFormatter

@dataclass(frozen=True)
class EngineBuild:
    """What an engine builder gets: the engine config and the model it samples.

    Attributes:
        cfg: the engine config (name, batch size, vLLM memory, length, dtype, sleep mode, tensor parallelism).
        model: the policy; ``hf`` samples with this very object, ``vllm`` loads ``model_path`` and
            takes the model's context length when ``engine.max_model_len`` is null.
        end_ids: the tokens that end a sample (``PromptFormatter.end_ids``).
        pad_id: token used for padding.
        model_path: folder holding the model's ``save_pretrained`` files (an engine that loads its own copy needs it).
        seed: the engine's sampling seed (``hf`` reseeds per call from the sampling params instead).
        compute_dtype: the in-process engine's autocast dtype (``model.compute_dtype`` resolved); None
            computes in the parameters' dtype.
    """

    cfg: EngineConfig
    model: PreTrainedModel
    end_ids: tuple[int, ...]
    pad_id: int
    model_path: str | None = None
    seed: int = 0
    compute_dtype: torch.dtype | None = None


def _no_check(cfg: Any) -> None:
    """An engine that refuses no setting."""


ENGINES: Registry[Callable[[EngineBuild], Engine]] = Registry(
    "engine", __package__, check=_no_check, runs_here=_no_check, in_process=False, own_logprobs=False,
)
"""Engine builders by ``engine.name``, from any module of :mod:`tsctl.engines`. Each declares ``check`` (the
composed :class:`TsctlConfig`'s settings it refuses, raising ConfigError), ``runs_here`` (its
:class:`EngineConfig` settings this machine cannot run, asked before any run folder is made),
``in_process`` (it samples the model object it is given: the engine of older snapshots, seed models and
warm-up scoring) and ``own_logprobs`` (its log-probs may stand for the trainer's, ``trainer.old_logprobs=engine``)."""


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


@ENGINES.register("vllm", check=_check_vllm, runs_here=vllm_platform.check_runs_here)
def _build_vllm(build: EngineBuild) -> Engine:
    from tsctl.engines.vllm import VLLMEngine

    cfg, model = build.cfg, build.model
    vllm_platform.check_runs_here(cfg)
    vllm_platform.check_model_runs_here(model.config)
    if build.model_path is None:
        raise ValueError("the vllm engine loads the model from a folder: pass model_path (a save_pretrained folder)")
    dtype = vllm_platform.dtype(cfg)
    max_model_len = cfg.max_model_len or model.config.max_position_embeddings
    return VLLMEngine(
        build.model_path, build.end_ids, dtype=dtype, seed=build.seed, gpu_memory_utilization=cfg.gpu_memory_utilization,
        tensor_parallel_size=cfg.tensor_parallel_size, max_model_len=max_model_len, max_num_seqs=cfg.batch_size,
        enable_sleep_mode=vllm_platform.sleep_mode(cfg), enforce_eager=cfg.enforce_eager,
        kv_cache_bytes=vllm_platform.cpu_kv_cache_bytes(model.config, dtype, max_model_len, cfg.batch_size),
    )


def build_engine(
    cfg: EngineConfig, model: PreTrainedModel, end_ids: int | Sequence[int], pad_id: int, model_path: str | None = None, seed: int = 0,
    compute_dtype: torch.dtype | None = None,
) -> Engine:
    """Build the engine ``cfg.name`` for ``model`` (the arguments are :class:`EngineBuild`'s; ``end_ids`` may be one token)."""
    ends = (end_ids,) if isinstance(end_ids, int) else tuple(end_ids)
    return ENGINES.get(cfg.name)(EngineBuild(cfg, model, ends, pad_id, model_path, seed, compute_dtype))


def in_process(cfg: EngineConfig) -> EngineConfig:
    """``cfg`` with the first registered engine that samples the model object it is given (``hf``)."""
    return dataclasses.replace(cfg, name=next(n for n in ENGINES.names() if ENGINES.needs(n).in_process))


def check_runs_here(cfg: EngineConfig) -> None:
    """Refuse, in one line, an engine setting this machine cannot run (the engine's declared ``runs_here``)."""
    ENGINES.needs(cfg.name).runs_here(cfg)


@dataclass
class Policy:
    """A model to sample from: the model (eval mode), its prompt formatter and an engine over it."""

    model: PreTrainedModel
    formatter: PromptFormatter
    engine: Engine


def load_policy(cfg: TsctlConfig, path: str, key: str = "model.path") -> Policy:
    """The model at ``path`` (``model.dtype`` on ``model.device``, eval mode) with its formatter and an
    ``engine.name`` engine seeded with ``seed``, computing in ``model.compute_dtype``.

    ``key`` is the setting that named ``path`` (quoted in load errors).
    """
    model, tokenizer = load_model(path, cfg.model.dtype, cfg.model.device, key=key)
    model.eval()
    formatter = PromptFormatter(tokenizer, cfg.model.use_chat_template, model.generation_config)
    engine = build_engine(cfg.engine, model, formatter.end_ids, formatter.pad_id, str(path), seed=cfg.seed, compute_dtype=precision.compute_dtype(cfg, model))
    return Policy(model, formatter, engine)
