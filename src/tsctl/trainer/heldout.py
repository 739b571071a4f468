"""Held-out evaluation inside training: greedy accuracy and sampled pass@1 on the task's held-out split."""

from __future__ import annotations

import time

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine, SamplingParams
from tsctl.models.prompts import PromptFormatter
from tsctl.scoring import greedy_accuracy, sample_and_score
from tsctl.tasks.base import Task
from tsctl.trainer.schedule import step_seed


def heldout_metrics(engine: Engine, formatter: PromptFormatter, task: Task, cfg: TsctlConfig, step: int) -> dict[str, float]:
    """``eval/greedy_accuracy`` on ``trainer.eval_problems`` and ``eval/pass@1`` on ``eval_samples_problems``."""
    start = time.perf_counter()
    heldout = list(task.problems("heldout"))
    tr, e = cfg.trainer, cfg.engine
    greedy = greedy_accuracy(engine, formatter, task, heldout[: tr.eval_problems], e.max_new_tokens)
    params = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=step_seed(cfg.seed, step, 3))
    sampled = sample_and_score(engine, formatter, task, heldout[: tr.eval_samples_problems], params, n=tr.eval_samples)
    return {
        "eval/greedy_accuracy": greedy,
        "eval/pass@1": float(sampled.rewards.mean()),
        "eval/seconds": time.perf_counter() - start,
    }
