"""``tsctl warmup``: build the tiny built-in model, warm it up on the task, score it, cache it.

Every command that starts from ``model.path`` (``train``, and ``eval``/``seed``/``rollout`` without a
checkpoint) runs this stage first when ``model.path=builtin`` (:func:`base_model_path`), so the
built-in model is warmed up once per architecture, warm-up settings and task
(:mod:`tsctl.models.builtin`). Its held-out score is the greedy accuracy of
:mod:`tsctl.evaluation.scoring`, sampled by an ``hf`` engine whatever ``engine.name``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.engines.factory import build_engine, in_process
from tsctl.evaluation.scoring import greedy_accuracy
from tsctl.models.builtin import WARMUP_REPORT, Scorer, ensure_builtin
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem, Task


def warmup(cfg: TsctlConfig, rebuild: bool = False) -> tuple[Path, dict]:
    """Build (or, without ``rebuild``, find) the built-in model; its folder and its ``warmup.json`` report."""
    path = ensure_builtin(cfg, heldout_scorer(cfg), rebuild=rebuild)
    return path, json.loads((path / WARMUP_REPORT).read_text())


def base_model_path(cfg: TsctlConfig) -> str:
    """``model.path``, building and warming up the built-in model first when it is ``builtin``."""
    return str(ensure_builtin(cfg, heldout_scorer(cfg))) if cfg.model.path == "builtin" else cfg.model.path


def heldout_scorer(cfg: TsctlConfig) -> Scorer:
    """Greedy accuracy of a warmed-up model, sampled with an ``hf`` engine over it (the model is not in a folder yet,
    which a ``vllm`` engine would load from)."""

    def score(model: PreTrainedModel, formatter: PromptFormatter, task: Task, problems: Sequence[Problem]) -> float:
        engine = build_engine(in_process(cfg.engine), model, formatter.end_ids, formatter.pad_id)
        return greedy_accuracy(engine, formatter, task, problems, cfg.engine.max_new_tokens)

    return score
