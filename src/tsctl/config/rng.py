"""The random streams of a run: one purpose id per stream, every seed a pure function of ``(seed, step, stream)``.

Each random choice of a step draws from its own stream, so a resumed run redraws exactly what the
killed one would have, and one stream's draws never shift another's. The ids are part of every
run's numbers: never renumber them.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Stream(IntEnum):
    """Purpose ids of the random streams (the third entropy word of :func:`step_seed`)."""

    SAMPLING = 1
    """The rollout engine's sampling of a step (``tsctl rollout``: of ``shards.data_step``)."""
    SHUFFLE = 2
    """The update's shuffle of the batch into mini-batches."""
    HELDOUT = 3
    """Sampled responses of the held-out evaluation inside training."""
    SEED_SAMPLING = 4
    """Behaviour responses of a refresh window's seeds (and their cut points)."""
    PROBE = 5
    """The behaviour pool's probe problems and their sampled responses."""
    SELECTOR = 6
    """A window's choice of behaviour snapshot per prompt (``seeds.selector``)."""
    EXTRA_PROMPTS = 7
    """Dynamic sampling's refill prompts (one stream per step and round)."""
    POLICY_LOSS = 8
    """The policy loss's random choices of the update (``algo.policy_loss=clip_cov``: the tokens whose gradient it drops)."""
    REWARD = 9
    """``task.reward=random``: each training sample's reward, drawn per sample (group and place in it) of the step."""
    RESAMPLE = 10
    """Dynamic sampling's refill round ``r`` samples with purpose ``RESAMPLE + r``."""
    ARM = 100
    """An older snapshot of age ``a`` (windows) writes its seeds with purpose ``ARM + a``."""


def step_seed(seed: int, step: int, purpose: int) -> int:
    """A 63-bit seed for one purpose (a :class:`Stream`, or ``RESAMPLE + r`` / ``ARM + a``) of one step."""
    return int(np.random.default_rng([seed, step, int(purpose)]).integers(2**63 - 1))


def rank_seed(seed: int, rank: int) -> int:
    """The seed rank ``rank`` of a ``torchrun`` job samples with in place of ``seed``: rank 0 keeps it, every other
    rank draws another 63-bit seed from ``(seed, rank)``, so no two ranks sample their prompts with the same stream."""
    if rank == 0:
        return seed
    return int(np.random.default_rng([seed, rank]).integers(2**63 - 1))
