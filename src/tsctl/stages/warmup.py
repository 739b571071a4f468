"""``tsctl warmup``: build the tiny built-in model, warm it up on the task, score it, cache it.

Every command that starts from ``model.path`` (``train``, and ``eval``/``seed``/``rollout`` without a
checkpoint) runs this stage first when ``model.path=builtin`` (:func:`base_model_path`), so the
built-in model is warmed up once per architecture, warm-up settings and task content
(:mod:`tsctl.models.builtin`). Before a warm-up, the task's data is read and checked
(:func:`~tsctl.trainer.data_checks.check_data`): a data refusal costs seconds, not a warm-up. Its held-out score is
the greedy accuracy of :mod:`tsctl.evaluation.scoring`, sampled by an ``hf`` engine whatever ``engine.name``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.engines.factory import build_engine, in_process
from tsctl.evaluation.scoring import greedy_accuracy
from tsctl.models.builtin import WARMUP_REPORT, Scorer, builtin_dir, ensure_builtin
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem, Task
from tsctl.trainer.data_checks import check_data


def warmup(cfg: TsctlConfig, rebuild: bool = False) -> tuple[Path, dict]:
    """Build (or, without ``rebuild``, find) the built-in model; its folder and its ``warmup.json`` report."""
    path = _builtin(cfg, rebuild)
    return path, json.loads((path / WARMUP_REPORT).read_text())


def base_model_path(cfg: TsctlConfig) -> str:
    """``model.path``, building and warming up the built-in model first when it is ``builtin``."""
    return str(_builtin(cfg)) if cfg.model.path == "builtin" else cfg.model.path


def _builtin(cfg: TsctlConfig, rebuild: bool = False) -> Path:
    """The built-in model's folder, warmed up first where it is not cached (or ``rebuild``), after its data is checked."""
    if rebuild or not (builtin_dir(cfg) / WARMUP_REPORT).is_file():
        check_data(cfg, scored=0)  # the warm-up's score reads as many held-out problems as there are, none included
    return ensure_builtin(cfg, heldout_scorer(cfg), rebuild=rebuild)


def heldout_scorer(cfg: TsctlConfig) -> Scorer:
    """Greedy accuracy of a warmed-up model, sampled with an ``hf`` engine over it (the model is not in a folder yet,
    which a ``vllm`` engine would load from)."""

    def score(model: PreTrainedModel, formatter: PromptFormatter, task: Task, problems: Sequence[Problem]) -> float:
        engine = build_engine(in_process(cfg.engine), model, formatter.end_ids, formatter.pad_id)
        return greedy_accuracy(engine, formatter, task, problems, cfg.engine.max_new_tokens)

    return score
