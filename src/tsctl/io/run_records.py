"""A finished run's record: the few small files that say what the run was and what it measured, kept
apart from its checkpoints, seeds and rollouts, so that a sweep's results can be stored (a results page
keeps them in git) and reported on again after the run folders are gone.

A record folder mirrors the run folder, the metrics gzipped (byte-for-byte the same for the same run)::

    <record>/config.yaml  manifest.json  final_eval.json  metrics.jsonl.gz  .hydra/overrides.yaml

:func:`save_record` writes one from a run folder, :func:`restore_record` a run folder from one: that
folder is a finished run as ``tsctl report`` and ``tsctl ablate`` (which skips it) see it, without the
checkpoints a resumed or re-evaluated run would need.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from tsctl.io import atomic
from tsctl.io.runs import METRICS_GZ, RunError, gunzip_metrics

COPIED = ("config.yaml", "manifest.json", "final_eval.json", ".hydra/overrides.yaml")
"""Files copied as they are (those the run has)."""

METRICS = "metrics.jsonl"


def is_record(path: Path) -> bool:
    """A record folder has a manifest and gzipped metrics."""
    return (path / "manifest.json").is_file() and (path / METRICS_GZ).is_file()


def save_record(run: Path, record: Path) -> None:
    """Write the record of the run folder ``run`` to ``record`` (staged, then renamed into place).

    Raises:
        RunError: ``run`` has no manifest or no metrics.
    """
    if not (run / "manifest.json").is_file() or not (run / METRICS).is_file():
        raise RunError(f"{run} is not a run folder (no manifest.json or {METRICS}); nothing to keep a record of")
    with atomic.staged_dir(record) as staged:
        _copy_listed(run, staged)
        (staged / METRICS_GZ).write_bytes(gzip.compress((run / METRICS).read_bytes(), mtime=0))


def restore_record(record: Path, run: Path) -> None:
    """Write the run folder ``run`` from the record folder ``record`` (staged, then renamed into place).

    Raises:
        RunError: ``record`` is not a record, or its metrics are damaged (the fix: delete it and train the point again).
    """
    if not is_record(record):
        raise RunError(f"{record} is not a run record (no manifest.json or {METRICS_GZ})")
    metrics = gunzip_metrics(record)
    with atomic.staged_dir(run) as staged:
        _copy_listed(record, staged)
        (staged / METRICS).write_bytes(metrics)


def _copy_listed(source: Path, target: Path) -> None:
    """Copy the files of :data:`COPIED` that ``source`` has into ``target``."""
    for name in COPIED:
        if (source / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / name, target / name)
