"""The ``eval``, ``shards``, ``logger`` and ``report`` groups: what the other commands read and write."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class EvalConfig:
    """``tsctl eval``: which checkpoints, which benchmarks, how many samples."""

    checkpoint: Optional[str] = None
    """A model folder, a run folder, or null for ``model.path``."""
    step: str = "last"
    """With a run folder: ``last``, ``all`` or a step number."""
    benchmarks: list[str] = field(default_factory=lambda: ["heldout"])
    """Benchmarks by name (``conf/benchmark/<name>.yaml``); ``heldout`` is the task's held-out split."""
    k: int = 8
    """Samples per problem for sampled pass@1 and pass@k."""
    pass_k: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    """k values of the unbiased pass@k estimator (each <= k)."""
    limit: Optional[int] = None
    """Score only the first ``limit`` problems of each benchmark."""
    on_bad_row: str = "error"
    """A malformed benchmark row: ``error`` (stop, naming file, line and field) or ``skip`` (count and report)."""
    overwrite: bool = False
    """Replace results already written for the same checkpoint and benchmark; false refuses to."""


@dataclass
class ShardsConfig:
    """Inputs and outputs of the stand-alone stages ``tsctl seed`` and ``tsctl rollout``."""

    checkpoint: Optional[str] = None
    """The model the stage runs: pi_b for ``seed``, the current policy for ``rollout``. A model
    folder, a run folder (with ``shards.step``), or null for ``model.path``."""
    step: str = "last"
    """With a run folder: ``last`` or a step number."""
    data_step: int = 0
    """Use the prompts that ``tsctl train`` draws at this step (same seed and batch size)."""
    steps: int = 1
    """Number of consecutive training steps whose prompts are used."""
    out_dir: Optional[str] = None
    """Folder of ``seeds.parquet`` and ``rollouts.parquet``; null = ``<runs_dir>/<experiment>/shards``."""
    overwrite: bool = False
    """Replace shards that already exist (otherwise the stage refuses)."""


@dataclass
class LoggerConfig:
    """Where metrics go besides ``metrics.jsonl`` (always written).

    The default is ``console``: it needs no account, no network and no extra package, and every
    metric is in ``metrics.jsonl`` anyway. ``logger=wandb`` adds one wandb run per training run
    (config and metrics; under ``tsctl ablate`` also the final evaluation and the run's plots),
    offline by default so that it works with no network and no account; upload later with
    ``wandb sync <run>/wandb/offline-run-*`` or log live with ``logger.wandb_mode=online``.
    """

    name: str = "console"
    """``console`` (rich progress) or ``wandb`` (also logs to Weights & Biases)."""
    wandb_project: str = "tsctl"
    """wandb project."""
    wandb_mode: str = "offline"
    """wandb mode: ``offline`` (default; sync later with ``wandb sync``), ``online`` or ``disabled``."""


@dataclass
class ReportConfig:
    """``tsctl report`` (and the report ``tsctl ablate`` writes at the end): how points are compared."""

    baseline: Optional[str] = None
    """The point every other point is compared with, as ``key=value`` (``report.baseline=ratio=0``;
    several keys separated by spaces); null = the first value of the first swept key."""
    level: float = 0.95
    """Confidence level of every interval in the report."""
    equivalence_margin: Optional[float] = None
    """Margin of the equivalence test (TOST over seeds, Holm-adjusted) of each held-out comparison, in the held-out
    metrics' units (a fraction of problems, e.g. 0.02); a comparison is called ``equivalent within ±margin`` only
    when it passes. null = no equivalence test, and no comparison is called equivalent."""
