"""Score one model on one benchmark: sampled and greedy responses, pass@k, entropy, length.

- ``pass@1`` is the share of solved samples over all ``eval.k`` samples per problem, and ``pass@k``
  the unbiased estimator (:mod:`tsctl.algo.passk`) from the same samples; a sample counts as solved
  when its reward is at least 1 (:mod:`tsctl.evaluation.scoring`, as everywhere).
- ``greedy_accuracy`` is the share of problems solved by one temperature-0 response.
- ``entropy`` is the token-mean entropy (nats) of the model's sampling distribution (logits divided by
  ``engine.temperature``, as in training) at each token of the sampled responses: as the engine
  reported it while sampling, or teacher-forced when the engine reports none (vLLM).
- ``mean_length`` (tokens), ``truncation_rate`` (share cut at ``engine.max_new_tokens``) and ``answer_found``
  (share stating a final answer the grader reads, :func:`~tsctl.tasks.grading.answer_found`) are over the sampled
  responses.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Completion, Engine, SamplingParams
from tsctl.evaluation.scoring import Scored, greedy, sample_and_score, solve_rates
from tsctl.evaluation.suites import Suite
from tsctl.models.batch import collate
from tsctl.models.logprobs import response_logprobs
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import Sample
from tsctl.tasks.grading import answer_found

ENTROPY_CHUNK_TOKENS = 4096
"""Most prompt + response tokens (rows x longest row) in one teacher-forced forward for entropy."""


def score_suite(
    model: PreTrainedModel, engine: Engine, formatter: PromptFormatter, suite: Suite, cfg: TsctlConfig
) -> tuple[dict[str, float], dict[str, list[Any]]]:
    """The metrics of ``model`` on ``suite`` (see the module docstring) and its samples as columns of an eval shard."""
    e, k = cfg.engine, cfg.eval.k
    sampling = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=cfg.seed)
    sampled = sample_and_score(engine, formatter, suite.task, suite.problems, sampling, n=k)
    greedy_scored = greedy(engine, formatter, suite.task, suite.problems, e.max_new_tokens)
    if all(c.entropies is not None for c in sampled.completions):
        entropy = reported_entropy(sampled.completions)
    else:
        prompts = [formatter.prompt_ids(p.question) for p in suite.problems for _ in range(k)]
        responses = [c.token_ids for c in sampled.completions]
        entropy = mean_entropy(model, prompts, responses, e.temperature or 1.0, formatter.pad_id)
    metrics = {
        **solve_rates(sampled, greedy_scored, cfg.eval.pass_k),
        "entropy": entropy,
        "mean_length": float(sampled.lengths.mean()),
        "truncation_rate": float((~sampled.finished).mean()),
        "answer_found": float(np.mean([answer_found(text, suite.task.answer_marker) for text in sampled.texts])),
    }
    return metrics, sample_columns(suite, sampled, greedy_scored)


def reported_entropy(completions: Sequence[Completion]) -> float:
    """Token-mean of the entropies the engine reported at every generated token."""
    values = [h for c in completions for h in c.entropies or []]
    return sum(values) / len(values) if values else 0.0


def mean_entropy(
    model: PreTrainedModel, prompts: Sequence[list[int]], responses: Sequence[list[int]], temperature: float, pad_id: int
) -> float:
    """Token-mean entropy of ``model`` at every response token, teacher-forced in chunks (no gradient)."""
    samples = [
        Sample(group=0, prompt_id="", prompt_ids=list(p), generated_ids=list(r), generated_logprobs=[], finished=True)
        for p, r in zip(prompts, responses)
    ]
    total, tokens = 0.0, 0
    for chunk in _chunks(samples, ENTROPY_CHUNK_TOKENS):
        batch = collate(chunk, torch.zeros(len(chunk)), pad_id, model.device)
        with torch.no_grad():
            _, entropy = response_logprobs(model, batch, temperature, with_entropy=True)
        total += float(entropy[batch.resp_mask].sum())
        tokens += int(batch.resp_mask.sum())
    return total / tokens if tokens else 0.0


def _chunks(samples: Sequence[Sample], budget: int) -> Iterator[list[Sample]]:
    """Consecutive runs of samples whose padded size (rows x longest row) stays within ``budget`` tokens."""
    chunk: list[Sample] = []
    longest = 0
    for sample in samples:
        size = len(sample.prompt_ids) + len(sample.response_ids)
        if chunk and (len(chunk) + 1) * max(longest, size) > budget:
            yield chunk
            chunk, longest = [], 0
        chunk.append(sample)
        longest = max(longest, size)
    if chunk:
        yield chunk


def sample_columns(suite: Suite, sampled: Scored, greedy: Scored) -> dict[str, list[Any]]:
    """Every sampled then every greedy response as the columns of an ``eval`` shard (:mod:`tsctl.io.shards`)."""
    drawn = len(sampled.completions)
    n = sampled.rewards.shape[1]
    ids = [problem.id for problem in suite.problems]
    completions = sampled.completions + greedy.completions
    return {
        "problem_id": [ids[i // n] for i in range(drawn)] + ids,
        "sample": [i % n for i in range(drawn)] + [0] * len(ids),
        "greedy": [False] * drawn + [True] * len(ids),
        "response": sampled.texts + greedy.texts,
        "response_ids": [c.token_ids for c in completions],
        "tokens": [len(c.token_ids) for c in completions],
        "finished": [c.finished for c in completions],
        "reward": sampled.rewards.ravel().tolist() + greedy.rewards.ravel().tolist(),
    }
