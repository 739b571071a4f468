"""Numbers in the ranges of the libraries that receive them, for every key of the config.

OmegaConf checks a value's type only, so ``trainer.lr=nan`` or ``seed=-1`` would compose and then fail
deep inside torch, numpy or AdamW with their own traceback, after the run folder exists. Here, before:

- every float is finite (AdamW, the samplers and the chunk sizes refuse NaN and infinity, or turn every
  loss into NaN);
- every integer fits the 64-bit integers torch and numpy hold;
- every seed (:data:`SEEDS`) is in ``0 .. 2**63 - 1``: numpy's generators take no negative seed, torch's
  none of 2**64 or more, and the per-step seeds tsctl draws from it are 63-bit.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig

SEEDS = ("seed", "task.data_seed", "model.warmup.seed")
"""The keys that seed random generators."""

LARGEST = 2**63 - 1
"""The largest 64-bit signed integer: torch's and numpy's bound, and the bound of a seed."""


def check(cfg: TsctlConfig) -> None:
    """Every number of ``cfg`` in its library's range (module docstring); the fix names the schema's default."""
    defaults = dict(_leaves(TsctlConfig()))
    for key, value in _leaves(cfg):
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                continue
            fix = f"e.g. {key}={defaults[key]} (the default)" if key in defaults and not isinstance(defaults[key], list) else "use a finite value"
            if isinstance(item, float) and not math.isfinite(item):
                raise ConfigError(key, f"{item} is not a finite number, which torch and the optimiser need; {fix}")
            if key in SEEDS and not 0 <= item <= LARGEST:
                raise ConfigError(key, f"{item} is out of range for a seed: numpy's generators take 0 or more and torch's less than 2**64; "
                                  f"allowed: 0 <= {key} <= 2**63 - 1 ({LARGEST}); {fix}")
            if isinstance(item, int) and abs(item) > LARGEST:
                raise ConfigError(key, f"{item} does not fit the 64-bit integers torch and numpy hold (at most {LARGEST}); {fix}")


def _leaves(section: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every field of a config dataclass, nested sections walked."""
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        key = f"{prefix}{field.name}"
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, f"{key}.")
        else:
            yield key, value
