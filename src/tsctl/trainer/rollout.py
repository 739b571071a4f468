"""Generate a step's groups: ``n`` responses per prompt, some continuing behaviour-policy prefixes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from tsctl.config.knobs import uses_seeds
from tsctl.config.rng import Stream, step_seed
from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine, Request, SamplingParams
from tsctl.models.prompt_fit import FittingTask, PromptRoom
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import Sample
from tsctl.seeds.bank import SeedBank
from tsctl.seeds.base import Seed
from tsctl.tasks.base import Problem, Task
from tsctl.tasks.grading import answer_found
from tsctl.tasks.registry import build_task
from tsctl.tasks.reward_controls import TrainingReward, training_reward
from tsctl.tasks.schedule import extra_prompts, step_prompts
from tsctl.trainer.parallel import Parallel


def prompt_room(cfg: TsctlConfig, engine: Engine) -> PromptRoom:
    """How long a prompt of ``cfg``'s may be on ``engine``: its ``context_length`` less the longest response
    :func:`collect_groups` asks for, ``engine.max_new_tokens``, plus one in a Thinking Seeds run (a seed
    that takes the whole budget is still continued by one token)."""
    return PromptRoom(engine.context_length, cfg.engine.max_new_tokens, cfg.task.overlong_prompts, uses_seeds(cfg))


def servable_task(cfg: TsctlConfig, formatter: PromptFormatter, engine: Engine, task: Task | None = None) -> FittingTask:
    """``cfg``'s task (``task`` when it is built already) with only the problems whose prompts fit :func:`prompt_room` (an
    error unless ``task.overlong_prompts=drop``): the one list that train, seed, rollout and the final evaluation draw from."""
    return FittingTask(task or build_task(cfg.task), formatter, prompt_room(cfg, engine))


@dataclass(frozen=True)
class Sampler:
    """What samples a group and grades it: the engine, the prompt formatter, the task's verifier, what a sample is
    rewarded for (``task.reward`` at the step; the grade by default), and the train split a run's steps draw their
    prompts from (:func:`sample_groups`; indexed by the prompt schedule, :mod:`tsctl.tasks.schedule`)."""

    engine: Engine
    formatter: PromptFormatter
    task: Task
    reward: TrainingReward = TrainingReward()
    problems: Sequence[Problem] = ()


def collect_groups(
    sampler: Sampler, problems: Sequence[Problem], seeds: Sequence[Sequence[Seed]] | None, n: int, params: SamplingParams, first_group: int = 0,
) -> list[Sample]:
    """Sample ``n`` responses for each problem with ``sampler`` and grade them (the reward, ``sampler.reward`` of the
    task's grade, and whether a final answer was found).

    The first ``len(seeds[i])`` samples of group ``i`` continue those seeds' prefixes (one distinct
    seed each; a seed cut at 0 leaves the prefix empty, but its sample is still ``seeded``); the rest
    are plain. A response (prefix + continuation) is at most
    ``params.max_new_tokens`` tokens: a continuation gets what its prefix leaves of that budget
    (at least one token) and is marked unfinished when it runs out.
    """
    engine, formatter, task = sampler.engine, sampler.formatter, sampler.task
    plan: list[tuple[int, int, Seed | None]] = []
    requests: list[Request] = []
    for i, problem in enumerate(problems):
        prompt = formatter.prompt_ids(problem.question)
        group_seeds = list(seeds[i])[:n] if seeds else []
        for j in range(n):
            seed = group_seeds[j] if j < len(group_seeds) else None
            plan.append((i, j, seed))
            prefix = seed.prefix_ids if seed else ()
            budget = max(1, params.max_new_tokens - len(prefix)) if prefix else None
            requests.append(Request(prompt_ids=prompt, prefix_ids=prefix, max_new_tokens=budget))
    completions = engine.generate(requests, params)
    samples = []
    for (i, j, seed), request, out in zip(plan, requests, completions):
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
            sample.seed_reward, sample.seed_fraction, sample.seed_predicted = seed.behaviour_reward, seed.fraction, seed.predicted
        text = formatter.decode(sample.response_ids)
        sample.answer_found = answer_found(text, task.answer_marker)
        sample.reward = sampler.reward(task.reward(problems[i], text), sample.answer_found, sample.group, j)
        samples.append(sample)
    return samples


def step_params(cfg: TsctlConfig, step: int, stream: int = Stream.SAMPLING, seed: Callable[[int], int] | None = None) -> SamplingParams:
    """The rollout's sampling settings (``engine.*``) with the seed of ``stream`` at ``step`` (passed through
    ``seed``, e.g. a rank's :meth:`~tsctl.trainer.parallel.Parallel.sampling_seed`, when given)."""
    e = cfg.engine
    value = step_seed(cfg.seed, step, stream)
    return SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=seed(value) if seed else value)


def sample_groups(step: int, cfg: TsctlConfig, sampler: Sampler, seeds: SeedBank | None, parallel: Parallel) -> list[Sample]:
    """The step's groups from ``sampler`` (its engine, its task's grades and its train split): ``trainer.batch_size``
    prompts of the schedule, ``trainer.n`` samples each, the first :func:`~tsctl.config.knobs.seeded_count` of a group
    continuing its seeds from ``seeds`` (a Thinking Seeds run's bank), over the ranks of ``parallel``.

    With ``algo.dynamic_sampling``, groups whose rewards are all equal are dropped and replaced by
    groups of fresh prompts (:func:`~tsctl.tasks.schedule.extra_prompts`, no seeds), for at most
    ``algo.max_resample_rounds`` rounds; refill round ``r`` numbers its groups from
    ``batch_size * (r + 1)``. The first ``batch_size`` informative groups are kept (the whole first
    draw when none is).

    Under ``torchrun`` each rank samples its block of the prompts (group numbers stay those of the
    whole step) with its own stream, refills its own block (from its own stream of extra prompts,
    numbering refill groups from ``batch_size * (r + 1)`` plus the block's start), and the ranks'
    samples are gathered in rank order (:meth:`~tsctl.trainer.parallel.Parallel.gather_samples`).
    """
    tr, problems = cfg.trainer, sampler.problems
    indices = step_prompts(cfg.seed, step, tr.batch_size, len(problems))
    group_seeds = seeds.for_step(step, indices) if seeds is not None else None
    block = parallel.world.block(tr.batch_size)
    indices = indices[block.start : block.stop]
    group_seeds = group_seeds[block.start : block.stop] if group_seeds is not None else None
    params = step_params(cfg, step, seed=parallel.sampling_seed)
    sampler = replace(sampler, reward=training_reward(cfg.task, cfg.seed, step))
    samples = collect_groups(sampler, [problems[i] for i in indices], group_seeds, tr.n, params, first_group=block.start)
    if not cfg.algo.dynamic_sampling:
        return parallel.gather_samples(samples)
    kept = _informative(samples)
    for round_ in range(cfg.algo.max_resample_rounds):
        missing = len(block) - len({s.group for s in kept})
        if missing <= 0:
            break
        extra = extra_prompts(parallel.sampling_seed(cfg.seed), step, round_, missing, len(problems))
        params = step_params(cfg, step, Stream.RESAMPLE + round_, seed=parallel.sampling_seed)
        first = tr.batch_size * (round_ + 1) + block.start
        refill = collect_groups(sampler, [problems[i] for i in extra], None, tr.n, params, first_group=first)
        kept += _informative(refill)
    groups = set(sorted({s.group for s in kept})[: len(block)])
    chosen = [s for s in kept if s.group in groups]
    return parallel.gather_samples(chosen if chosen else samples)


def _informative(samples: list[Sample]) -> list[Sample]:
    """Samples of groups whose rewards are not all equal."""
    by_group: dict[int, list[float]] = {}
    for s in samples:
        by_group.setdefault(s.group, []).append(s.reward)
    return [s for s in samples if len(set(by_group[s.group])) > 1]
