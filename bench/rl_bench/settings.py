"""What every side of the benchmark runs with, and the targets its figures are judged on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"
CLOCKS = ("wall", "cpu")
TARGETS = {
    "a_tsctl_over_trl": ("<=", 0.5),
    "b_ratio25_over_ratio0": ("<=", 1.10),
    "c_engine_over_generate": (">=", 1.5),
    "d_update_share_of_peak": (">=", 0.60),
    "d_packed_over_padded": (">=", 1.3),
    "a_tsctl_over_trl_compiled": ("<=", 0.45),
    "b_ratio25_over_ratio0_compiled": ("<=", 1.00),
    "d_update_share_of_peak_compiled": (">=", 0.75),
}


@dataclass(frozen=True)
class Settings:
    """The RL settings every side runs with."""

    batch_size: int = 16
    n: int = 8
    max_new_tokens: int = 48
    mini_batches: int = 2
    lr: float = 2e-4
    clip_low: float = 0.2
    clip_high: float = 0.28
    temperature: float = 1.0
    refresh: int = 10
    seed: int = 0
    task: tuple[str, ...] = ()
    """Overrides of the task every side trains on (none: the default task, countdown)."""

    @property
    def samples(self) -> int:
        return self.batch_size * self.n
