"""Generate a step's groups: ``n`` responses per prompt, some continuing behaviour-policy prefixes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tsctl.engines.base import Engine, Request, SamplingParams
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem, Task
from tsctl.trainer.samples import Sample


@dataclass(frozen=True)
class Seed:
    """A behaviour-policy prefix for one prompt.

    Attributes:
        prefix_ids: the cut behaviour response, shape [S] (never includes EOS).
        prefix_logprobs: pi_b log-probs of ``prefix_ids``, shape [S].
        behaviour_step: training step of the pi_b checkpoint.
        checkpoint: the pi_b checkpoint (a folder or ``step-N``).
    """

    prefix_ids: list[int]
    prefix_logprobs: list[float]
    behaviour_step: int
    checkpoint: str


def seeds_from_table(table: dict[str, list]) -> list[Seed]:
    """One :class:`Seed` per row of a seed shard (``read_shard(...).table.to_pydict()``): the cut prefix."""
    return [
        Seed(prefix_ids=ids[:cut], prefix_logprobs=lps[:cut], behaviour_step=step, checkpoint=ckpt)
        for ids, lps, cut, step, ckpt in zip(table["response_ids"], table["logprobs"], table["cut"], table["checkpoint_step"], table["checkpoint"])
    ]


def seeded_count(n: int, ratio: float) -> int:
    """Samples per group that continue a prefix: ``round(n * ratio / 100)``."""
    return int(round(n * ratio / 100.0))


def collect_groups(
    problems: Sequence[Problem],
    seeds: Sequence[Sequence[Seed]],
    n: int,
    engine: Engine,
    formatter: PromptFormatter,
    task: Task,
    params: SamplingParams,
    first_group: int = 0,
) -> list[Sample]:
    """Sample ``n`` responses for each problem and grade them.

    The first ``len(seeds[i])`` samples of group ``i`` continue those seeds' prefixes (one distinct
    seed each; a seed cut at 0 leaves the prefix empty, but its sample is still ``seeded``); the rest
    are plain. A response (prefix + continuation) is at most
    ``params.max_new_tokens`` tokens: a continuation gets what its prefix leaves of that budget
    (at least one token) and is marked unfinished when it runs out.
    """
    plan: list[tuple[int, Seed | None]] = []
    requests: list[Request] = []
    for i, problem in enumerate(problems):
        prompt = formatter.prompt_ids(problem.question)
        group_seeds = list(seeds[i])[:n] if seeds else []
        for j in range(n):
            seed = group_seeds[j] if j < len(group_seeds) else None
            plan.append((i, seed))
            prefix = seed.prefix_ids if seed else ()
            budget = max(1, params.max_new_tokens - len(prefix)) if prefix else None
            requests.append(Request(prompt_ids=prompt, prefix_ids=prefix, max_new_tokens=budget))
    completions = engine.generate(requests, params)
    samples = []
    for (i, seed), request, out in zip(plan, requests, completions):
        sample = Sample(
            group=first_group + i,
            prompt_id=problems[i].id,
            prompt_ids=list(request.prompt_ids),
            generated_ids=list(out.token_ids),
            generated_logprobs=list(out.logprobs),
            finished=out.finished,
        )
        if out.entropies is not None:
            sample.entropies = list(out.prefix_entropies or []) + list(out.entropies)
        if seed is not None:  # seeded even when the seed was cut at 0 (an empty prefix)
            sample.seeded = True
            sample.prefix_ids, sample.prefix_logprobs = list(seed.prefix_ids), list(seed.prefix_logprobs)
            sample.behaviour_step, sample.behaviour_checkpoint = seed.behaviour_step, seed.checkpoint
        sample.reward = task.reward(problems[i], formatter.decode(sample.response_ids))
        samples.append(sample)
    return samples
