"""Build the rollout engine named by ``engine.name`` (:mod:`tsctl.engines.registry`), and a model loaded to sample from
(:func:`load_policy`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import EngineConfig, TsctlConfig
from tsctl.engines.base import Demand, Engine
from tsctl.engines.registry import ENGINES, EngineBuild
from tsctl.models import precision
from tsctl.models.loading import load_model
from tsctl.models.prompt_fit import needed_context
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.registry import build_task


def build_engine(
    cfg: EngineConfig, model: PreTrainedModel, end_ids: int | Sequence[int], pad_id: int, model_path: str | None = None, seed: int = 0,
    compute_dtype: torch.dtype | None = None, demand: Callable[[], Demand] | None = None, log_dir: Path | None = None,
) -> Engine:
    """Build the engine ``cfg.name`` for ``model`` (the arguments are :class:`EngineBuild`'s; ``end_ids`` may be one token)."""
    ends = (end_ids,) if isinstance(end_ids, int) else tuple(end_ids)
    settings = ENGINES.settings(cfg.name, cfg)
    return ENGINES.get(cfg.name)(EngineBuild(cfg, model, ends, pad_id, model_path, seed, compute_dtype, demand, log_dir, settings))


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


def unread_keys(engine: str) -> list[str]:
    """The keys of the other engines' settings blocks, which the engine ``engine`` does not read (shown beside ``--cfg job``)."""
    return [f"engine.{name}.{f.name}" for name, block in ENGINES.blocks().items() if name != engine for f in dataclasses.fields(block)]


def check_runs_here(cfg: EngineConfig) -> None:
    """Refuse, in one line, an engine setting this machine cannot run (the engine's declared ``runs_here``)."""
    ENGINES.needs(cfg.name).runs_here(cfg, ENGINES.settings(cfg.name, cfg))


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
