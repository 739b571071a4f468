"""What a training run asks of its engine, before the engine is built: the longest request, and the most requests at once."""

from __future__ import annotations

from tsctl.config.knobs import seeded_count, uses_seeds, window_length
from tsctl.config.schema import TsctlConfig
from tsctl.distributed.world import World
from tsctl.engines.base import Demand
from tsctl.models.prompt_fit import needed_context
from tsctl.models.prompts import PromptFormatter
from tsctl.seeds.selectors import SELECTORS
from tsctl.tasks.base import Task


def train_demand(cfg: TsctlConfig, task: Task, formatter: PromptFormatter, world: World) -> Demand:
    """The :class:`~tsctl.engines.base.Demand` of a run of ``cfg`` on ``task`` on this rank of ``world``.

    Its context leaves room for the longest train or held-out prompt (:func:`~tsctl.models.prompt_fit.needed_context`).
    Its requests are the largest of one ``generate`` call's: a step's rollout (this rank's prompts x ``trainer.n``;
    dynamic sampling's refills are no larger), a refresh window's seeds (the window's prompts x the seeded samples of
    a group; :func:`~tsctl.config.knobs.window_length`), the held-out evaluation (greedy, then sampled) and a snapshot's probes
    (``seeds.selector=max_entropy``). Its adapters are the policy's and, with a selector declaring ``pool``, the pool's
    ``seeds.pool_size`` snapshots.
    """
    tr, s = cfg.trainer, cfg.seeds
    heldout = task.problems("heldout")
    context = needed_context([*task.problems("train"), *heldout], formatter, cfg.engine.max_new_tokens, uses_seeds(cfg))
    calls = [len(world.block(tr.batch_size, 0)) * tr.n]
    if uses_seeds(cfg):
        calls.append(window_length(cfg) * tr.batch_size * seeded_count(cfg))
    if uses_seeds(cfg) and SELECTORS.needs(s.selector).probes:
        calls.append(s.probe_prompts * s.probe_samples)
    if tr.eval_every:
        calls += [min(tr.eval_problems, len(heldout)), min(tr.eval_samples_problems, len(heldout)) * tr.eval_samples]
    pool = s.pool_size if uses_seeds(cfg) and SELECTORS.needs(s.selector).pool else 0
    return Demand(context=context, requests=max(calls), adapters=1 + pool)
