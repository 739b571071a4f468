"""Sample responses for problems and grade them: the one place that says what "solved" means.

A response solves its problem when its reward is at least :data:`SOLVED` (1.0). The built-in
tasks' and benchmarks' rewards are 0 or 1, where a share solved equals a mean reward. Every
evaluation goes through here:

- the built-in model's held-out score after its warm-up (``tsctl warmup``, :func:`greedy_accuracy`);
- held-out evaluation inside training, the ``eval/*`` metrics (:func:`heldout_metrics`);
- a sweep point's final evaluation, ``final_eval.json`` with its per-problem record (:func:`final_eval`);
- ``tsctl eval``'s greedy accuracy and pass@k (:func:`solve_rates`, used by :mod:`tsctl.evaluation.benchmark_scores`).

Greedy responses are temperature 0; sampled ones use the ``engine`` settings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from tsctl.algo.passk import mean_pass_at_k
from tsctl.config.rng import Stream, rank_seed, step_seed
from tsctl.config.schema import TsctlConfig
from tsctl.distributed.world import World, all_reduce, current
from tsctl.engines.base import Completion, Engine, Request, SamplingParams
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import SOLVED, Problem, Task
from tsctl.tasks.records import DataError


@dataclass
class Scored:
    """``n`` graded samples for each of ``P`` problems.

    Attributes:
        rewards: shape [P, n], each in [0, 1].
        lengths: response lengths in tokens, shape [P, n].
        finished: whether each response ended with EOS, shape [P, n].
        completions: the engine's outputs, row-major (problem p, sample j at p * n + j).
        texts: decoded responses, same order as ``completions``.
    """

    rewards: np.ndarray
    lengths: np.ndarray
    finished: np.ndarray
    completions: list[Completion]
    texts: list[str]

    @property
    def solved(self) -> np.ndarray:
        """Whether each response solved its problem (reward >= :data:`SOLVED`), bool [P, n]."""
        return self.rewards >= SOLVED


def sample_and_score(
    engine: Engine,
    formatter: PromptFormatter,
    task: Task,
    problems: Sequence[Problem],
    params: SamplingParams,
    n: int = 1,
) -> Scored:
    """Draw ``n`` responses per problem with ``params`` and grade each with the task's verifier."""
    prompts = [formatter.prompt_ids(p.question) for p in problems]
    requests = [Request(prompt_ids=ids) for ids in prompts for _ in range(n)]
    completions = engine.generate(requests, params)
    texts = [formatter.decode(c.token_ids) for c in completions]
    rewards = [task.reward(problems[i // n], text) for i, text in enumerate(texts)]
    shape = (len(problems), n)
    return Scored(
        rewards=np.asarray(rewards, dtype=np.float64).reshape(shape),
        lengths=np.asarray([len(c.token_ids) for c in completions]).reshape(shape),
        finished=np.asarray([c.finished for c in completions]).reshape(shape),
        completions=completions,
        texts=texts,
    )


def greedy(engine: Engine, formatter: PromptFormatter, task: Task, problems: Sequence[Problem], max_new_tokens: int) -> Scored:
    """One temperature-0 response per problem, graded."""
    return sample_and_score(engine, formatter, task, problems, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))


def greedy_accuracy(engine: Engine, formatter: PromptFormatter, task: Task, problems: Sequence[Problem], max_new_tokens: int) -> float:
    """Share of ``problems`` solved by the greedy response (0 for no problems)."""
    return float(greedy(engine, formatter, task, problems, max_new_tokens).solved.mean()) if len(problems) else 0.0


def pass_rates(solved: np.ndarray, ks: Sequence[int]) -> dict[str, float]:
    """``pass@k`` for each ``k`` of ``ks`` (unbiased estimator) from the solved samples [P, n] of each problem."""
    counts = np.full(solved.shape[0], solved.shape[1])
    return {f"pass@{k}": mean_pass_at_k(counts, solved.sum(axis=1), k) for k in ks}


def solve_rates(sampled: Scored, greedy_scored: Scored, pass_k: Sequence[int]) -> dict[str, float]:
    """``greedy_accuracy`` and ``pass@k`` for k = 1 and every k of ``pass_k`` (each <= samples per problem)."""
    return {"greedy_accuracy": float(greedy_scored.solved.mean()), **pass_rates(sampled.solved, sorted({1, *pass_k}))}


def heldout_metrics(engine: Engine, formatter: PromptFormatter, task: Task, cfg: TsctlConfig, step: int) -> dict[str, float]:
    """Held-out evaluation inside training: ``eval/greedy_accuracy`` on ``trainer.eval_problems`` problems and
    ``eval/pass@1`` (share of solved samples, ``trainer.eval_samples`` per problem) on ``trainer.eval_samples_problems``.

    Under ``torchrun`` every rank scores its block of each problem list (sampling with its own stream,
    :func:`~tsctl.config.rng.rank_seed`) and the solved counts are summed over the ranks.
    """
    start = time.perf_counter()
    heldout = list(task.problems("heldout"))
    tr, e = cfg.trainer, cfg.engine
    world = current()
    seed = rank_seed(step_seed(cfg.seed, step, Stream.HELDOUT), world.rank)
    params = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=seed)
    if not world.distributed:
        accuracy = greedy_accuracy(engine, formatter, task, heldout[: tr.eval_problems], e.max_new_tokens)
        pass_1 = float(sample_and_score(engine, formatter, task, heldout[: tr.eval_samples_problems], params, n=tr.eval_samples).solved.mean())
    else:
        greedy_part = _block(heldout[: tr.eval_problems], world)
        sampled_part = _block(heldout[: tr.eval_samples_problems], world)
        solved = greedy(engine, formatter, task, greedy_part, e.max_new_tokens).solved if greedy_part else np.zeros((0, 1), bool)
        drawn = sample_and_score(engine, formatter, task, sampled_part, params, n=tr.eval_samples).solved if sampled_part else np.zeros((0, 1), bool)
        counts = all_reduce(torch.tensor([solved.sum(), solved.size, drawn.sum(), drawn.size], dtype=torch.float64))
        accuracy, pass_1 = float(counts[0] / counts[1]) if counts[1] else 0.0, float(counts[2] / counts[3])
    return {
        "eval/greedy_accuracy": accuracy,
        "eval/pass@1": pass_1,
        "eval/seconds": time.perf_counter() - start,
    }


def _block(problems: Sequence[Problem], world: World) -> list[Problem]:
    """This rank's contiguous block of ``problems``."""
    block = world.block(len(problems))
    return list(problems[block.start : block.stop])


def final_eval(engine: Engine, formatter: PromptFormatter, task: Task, cfg: TsctlConfig, step: int) -> dict[str, Any]:
    """Greedy accuracy and pass@k (``eval.pass_k`` from ``eval.k`` samples) of a run's final checkpoint ``step`` on held-out problems.

    Greedy accuracy uses ``eval.limit`` or ``trainer.eval_problems`` problems, pass@k ``eval.limit``
    or ``trainer.eval_samples_problems`` problems, sampled at the rollout temperature with seed
    ``seed``. ``per_problem`` keeps the problem ids with whether the greedy response solved each
    (``greedy``) and how many of the ``eval.k`` samples did (``sampled``): what ``tsctl report``'s
    paired bootstrap over problems reads.

    Raises:
        DataError: the task has no held-out problem.
    """
    heldout = list(task.problems("heldout"))
    if not heldout:
        raise DataError("the held-out split has no problem to evaluate the final checkpoint on; give the task more problems (a file "
                        "task holds task.file.heldout_fraction of its rows out, or reads task.file.heldout_path=<file>)")
    e, tr = cfg.engine, cfg.trainer
    greedy_problems = heldout[: cfg.eval.limit or tr.eval_problems]
    sample_problems = heldout[: cfg.eval.limit or tr.eval_samples_problems]
    params = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=cfg.seed)
    sampled = sample_and_score(engine, formatter, task, sample_problems, params, n=cfg.eval.k).solved
    solved = greedy(engine, formatter, task, greedy_problems, e.max_new_tokens).solved[:, 0].astype(int)
    return {
        "step": step,
        "greedy_accuracy": float(solved.mean()) if len(greedy_problems) else 0.0,
        "greedy_problems": len(greedy_problems),
        "sampled_problems": len(sample_problems),
        "samples": cfg.eval.k,
        **pass_rates(sampled, cfg.eval.pass_k),
        "per_problem": {
            "greedy": {"ids": [p.id for p in greedy_problems], "solved": solved.tolist()},
            "sampled": {"ids": [p.id for p in sample_problems], "solved": sampled.sum(axis=1).tolist(), "samples": cfg.eval.k},
        },
    }
