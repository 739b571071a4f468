"""Sample responses for problems and grade them: shared by warm-up, training and evaluation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from tsctl.engines.base import Completion, Engine, Request, SamplingParams
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem, Task


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


def greedy_accuracy(engine: Engine, formatter: PromptFormatter, task: Task, problems: Sequence[Problem], max_new_tokens: int) -> float:
    """Share of ``problems`` solved by the greedy response."""
    scored = sample_and_score(engine, formatter, task, problems, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    return float(scored.rewards.mean()) if len(problems) else 0.0
