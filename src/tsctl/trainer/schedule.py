"""Which prompts each step trains on: a pure function of (seed, step), so resume needs no state.

Step ``s`` takes prompts ``s * batch_size ...`` of an endless stream made of seeded permutations of
the train split (a new permutation per epoch). Dynamic sampling's extra prompts come from a
separate stream keyed by (seed, step, round).
"""

from __future__ import annotations

import numpy as np


def step_prompts(seed: int, step: int, batch_size: int, num_problems: int) -> list[int]:
    """Indices into the train split of the ``batch_size`` prompts of ``step``."""
    out: list[int] = []
    position = step * batch_size
    while len(out) < batch_size:
        epoch, offset = divmod(position, num_problems)
        perm = np.random.default_rng([seed, epoch]).permutation(num_problems)
        take = min(batch_size - len(out), num_problems - offset)
        out.extend(int(i) for i in perm[offset : offset + take])
        position += take
    return out


def extra_prompts(seed: int, step: int, round_: int, count: int, num_problems: int) -> list[int]:
    """Indices of ``count`` refill prompts for dynamic sampling round ``round_`` of ``step``."""
    rng = np.random.default_rng([seed, step, round_, 7])
    return [int(i) for i in rng.choice(num_problems, size=count, replace=count > num_problems)]


def step_seed(seed: int, step: int, purpose: int) -> int:
    """A 63-bit seed for one purpose (sampling, shuffling, ...) of one step."""
    return int(np.random.default_rng([seed, step, purpose]).integers(2**63 - 1))
