"""One run is one folder: ``<runs_dir>/<experiment>/<name>/``.

Contents: ``config.yaml`` (resolved), ``manifest.json`` (status, versions, git revision, times),
``metrics.jsonl`` (one JSON object per step), ``checkpoints/step-N/``, ``seeds/``, ``eval/``,
``plots/``. An existing run is never overwritten: it is resumed (``resume=true``) or refused.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tsctl import atomic
from tsctl.config.schema import TsctlConfig


class RunError(RuntimeError):
    """A run folder cannot be used as asked (exists without resume, resume of nothing, ...)."""


def run_name(cfg: TsctlConfig) -> str:
    """``cfg.name`` or a name from the sweep knobs: ``ratio25-uniform-refresh10-seed0``."""
    if cfg.name:
        return cfg.name
    ratio = f"{cfg.ratio:g}"
    if cfg.ratio == 0:
        return f"ratio0-seed{cfg.seed}"
    return f"ratio{ratio}-{cfg.truncation}-refresh{cfg.refresh}-seed{cfg.seed}"


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("tsctl", "torch", "transformers", "hydra-core", "vllm"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def _git_revision() -> str | None:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return rev.stdout.strip() or None


@dataclass
class RunDir:
    """Paths and bookkeeping of one run folder."""

    path: Path

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def manifest_file(self) -> Path:
        return self.path / "manifest.json"

    def manifest(self) -> dict[str, Any]:
        return json.loads(self.manifest_file.read_text()) if self.manifest_file.is_file() else {}

    def set_status(self, status: str, **extra: Any) -> None:
        """Record ``status`` (running/completed/failed) and ``extra`` fields in the manifest."""
        data = self.manifest()
        data.update(extra, status=status, updated=time.strftime("%Y-%m-%dT%H:%M:%S"))
        atomic.write_json(self.manifest_file, data)

    def append_metrics(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` and flush it to disk."""
        with open(self.metrics_file, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()

    def read_metrics(self) -> list[dict[str, Any]]:
        """All complete records of ``metrics.jsonl`` (a torn last line is ignored)."""
        if not self.metrics_file.is_file():
            return []
        records = []
        for line in self.metrics_file.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
        return records

    def truncate_metrics(self, after_step: int) -> None:
        """Drop records of steps after ``after_step`` (work a killed run did past its checkpoint)."""
        kept = [r for r in self.read_metrics() if r.get("step", -1) <= after_step]
        atomic.write_text(self.metrics_file, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def open_run(cfg: TsctlConfig, node: DictConfig, command: str) -> RunDir:
    """Create the run folder for ``cfg``, or reopen it when ``cfg.resume`` is set.

    Raises:
        RunError: the folder exists and resume is off, or resume is on and the saved config differs.
    """
    run = RunDir(Path(cfg.runs_dir) / cfg.experiment / run_name(cfg))
    saved = run.path / "config.yaml"
    resolved = OmegaConf.to_yaml(node, resolve=True)
    if saved.is_file():
        if not cfg.resume:
            raise RunError(
                f"run folder {run.path} already exists; continue it with `tsctl {command} ... resume=true`, "
                f"or choose another name=... or experiment=..."
            )
        before = OmegaConf.load(saved)
        before.resume, after = True, OmegaConf.create(resolved)
        if OmegaConf.to_container(before) != OmegaConf.to_container(after):
            raise RunError(f"resume of {run.path} with a different config; rerun with the same overrides (see {saved})")
        return run
    run.path.mkdir(parents=True, exist_ok=True)
    atomic.write_text(saved, resolved)
    run.set_status(
        "running",
        command=" ".join([command, *sys.argv[2:]]) if len(sys.argv) > 1 else command,
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        versions=_versions(),
        git_revision=_git_revision(),
    )
    return run
