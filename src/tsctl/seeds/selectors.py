"""Which behaviour snapshot writes each prompt's seeds: a string-keyed registry of selectors.

The behaviour pool (:mod:`tsctl.seeds.pool`) holds up to ``seeds.pool_size`` snapshots of the
policy, one per refresh window. When a window opens, its arms are the snapshots then in the pool,
newest first: arm ``a`` is the snapshot taken ``a`` windows earlier (arm 0 is the current weights,
what the paper uses). A selector maps the arms' statistics to one arm per prompt of the window;
all ``k`` seeds of a prompt come from that arm.

- ``latest``: arm 0 for every prompt (the default; the paper's fixed refresh).
- ``oldest``: the oldest snapshot in the pool for every prompt.
- ``uniform``: an arm drawn uniformly at random per prompt.
- ``max_entropy``: the arm whose responses on the probe set had the highest mean per-token
  surprisal (:func:`tsctl.seeds.pool.probe_surprisal`), for every prompt; ties go to the newest.
- ``bandit``: rewarded by the advantage its seeded samples earned (:class:`ArmStats` ``rewards``).
  ``seeds.bandit=ucb``: UCB1 for every prompt, ``mean_a + c * sqrt(2 ln N / n_a)`` with ``N`` the
  arms' total pulls; an arm never pulled goes first (the newest such arm). ``seeds.bandit=thompson``:
  per prompt, a draw from each arm's Gaussian posterior ``N(sum_a / (n_a + 1), c^2 / (n_a + 1))``
  (prior ``N(0, c^2)``, unit-scale noise: group-normalised advantages have std about 1); the
  highest draw wins. ``c`` is ``seeds.bandit_c``.

Arms are ages, not snapshot identities: "the snapshot from ``a`` windows ago" is the same arm in
every window, so a bandit learns which staleness of pi_b pays off (a brand-new snapshot every
window would otherwise be an untried arm that UCB picks at once, which is ``latest`` again).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tsctl.config.registry import Registry
from tsctl.config.schema import SeedsConfig


@dataclass(frozen=True)
class ArmStats:
    """What a selector sees when a window opens; every sequence has one entry per arm, newest first.

    Attributes:
        steps: training step of each arm's snapshot, shape [A].
        surprisal: mean per-token surprisal of each arm's responses on the probe set, shape [A]
            (None when not measured: only ``max_entropy`` needs it).
        pulls: seeded samples each arm has been rewarded for so far, shape [A].
        rewards: sum of the advantages those samples earned, shape [A].
    """

    steps: Sequence[int]
    surprisal: Sequence[float] | None = None
    pulls: Sequence[int] = ()
    rewards: Sequence[float] = ()

    def __len__(self) -> int:
        return len(self.steps)


Selector = Callable[[ArmStats, int, np.random.Generator, SeedsConfig], list[int]]
"""``(stats, prompts, rng, cfg) -> arm per prompt``; ``cfg`` is ``seeds``, of which a selector reads the keys it declares."""

SELECTORS: Registry[Selector] = Registry("selector", __package__, key="seeds.selector", pool=False, arm_log=False, probes=False, reads=())
"""Selectors by ``seeds.selector`` name, from any module of :mod:`tsctl.seeds`. Each declares what it needs:
``pool`` (it chooses among older snapshots, so the run keeps a behaviour pool; without it the current
weights write every seed), ``arm_log`` (its arms' rewards, ``seeds/pool/arms.jsonl``), ``probes`` (each
snapshot's probe surprisal, :attr:`ArmStats.surprisal`) and ``reads`` (the ``seeds.*`` keys it reads)."""

BANDITS = ("thompson", "ucb")
"""Values of ``seeds.bandit``."""


def select(name: str, stats: ArmStats, prompts: int, rng: np.random.Generator, cfg: SeedsConfig) -> list[int]:
    """The arm (index into ``stats``, 0 = newest) of each of ``prompts`` prompts under selector ``name``."""
    selector = SELECTORS.get(name)
    if len(stats) == 0:
        raise ValueError("the behaviour pool is empty: a window needs at least one snapshot")
    return selector(stats, prompts, rng, cfg)


@SELECTORS.register("latest")
def _latest(stats: ArmStats, prompts: int, rng: np.random.Generator, cfg: SeedsConfig) -> list[int]:
    return [0] * prompts


@SELECTORS.register("oldest", pool=True)
def _oldest(stats: ArmStats, prompts: int, rng: np.random.Generator, cfg: SeedsConfig) -> list[int]:
    return [len(stats) - 1] * prompts


@SELECTORS.register("uniform", pool=True)
def _uniform(stats: ArmStats, prompts: int, rng: np.random.Generator, cfg: SeedsConfig) -> list[int]:
    return [int(a) for a in rng.integers(0, len(stats), size=prompts)]


@SELECTORS.register("max_entropy", pool=True, probes=True, reads=("probe_prompts", "probe_samples"))
def _max_entropy(stats: ArmStats, prompts: int, rng: np.random.Generator, cfg: SeedsConfig) -> list[int]:
    if stats.surprisal is None or len(stats.surprisal) != len(stats):
        raise ValueError("max_entropy needs every arm's probe surprisal")
    return [int(np.argmax(stats.surprisal))] * prompts  # argmax takes the first (newest) of ties


@SELECTORS.register("bandit", pool=True, arm_log=True, reads=("bandit", "bandit_c"))
def _bandit(stats: ArmStats, prompts: int, rng: np.random.Generator, cfg: SeedsConfig) -> list[int]:
    pulls = np.asarray(stats.pulls if len(stats.pulls) else [0] * len(stats), dtype=np.float64)
    rewards = np.asarray(stats.rewards if len(stats.rewards) else [0.0] * len(stats), dtype=np.float64)
    if cfg.bandit == "ucb":
        return [ucb_arm(pulls, rewards, cfg.bandit_c)] * prompts
    if cfg.bandit == "thompson":
        draws = rng.normal(rewards / (pulls + 1), cfg.bandit_c / np.sqrt(pulls + 1), size=(prompts, len(stats)))
        return [int(a) for a in draws.argmax(axis=1)]
    raise ValueError(f"unknown bandit {cfg.bandit!r}; choose one of {', '.join(BANDITS)}")


def ucb_arm(pulls: np.ndarray, rewards: np.ndarray, c: float) -> int:
    """UCB1's arm: the newest never-pulled arm, else ``argmax mean + c * sqrt(2 ln N / n)`` (first of ties)."""
    untried = np.flatnonzero(pulls == 0)
    if len(untried):
        return int(untried[0])
    bonus = c * np.sqrt(2.0 * math.log(pulls.sum()) / pulls)
    return int(np.argmax(rewards / pulls + bonus))
