"""Which prompts each step trains on: a pure function of (seed, step), so resume needs no state.

Step ``s`` takes prompts ``s * batch_size ...`` of an endless stream made of seeded permutations of
the train split (a new permutation per epoch). Dynamic sampling's extra prompts come from a
separate stream keyed by (seed, step, round) (:attr:`tsctl.config.rng.Stream.EXTRA_PROMPTS`).
"""

from __future__ import annotations

import numpy as np

from tsctl.config.rng import Stream


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
    rng = np.random.default_rng([seed, step, round_, int(Stream.EXTRA_PROMPTS)])
    return [int(i) for i in rng.choice(num_problems, size=count, replace=count > num_problems)]
