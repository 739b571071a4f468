"""One run is one folder: ``<runs_dir>/<experiment>/<name>/``.

Contents: ``config.yaml`` (resolved), ``manifest.json`` (status, the config's digest, versions, git revision, times),
``metrics.jsonl`` (one JSON object per step), ``checkpoints/step-N/``, ``seeds/``, ``eval/``,
``plots/``. An existing run is never overwritten: it is resumed (``resume=true``) or refused, and
``resume=true`` of a run that does not exist is refused too. :func:`locate_run` checks this without
writing anything, so a command can load its model and data first and create the folder only when
they are sound (:func:`open_run`), and a failed start leaves no folder behind. A folder that is not a run, or a run
whose config, manifest and records disagree, is refused (:mod:`tsctl.io.run_identity`).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from tsctl.config.knobs import uses_seeds
from tsctl.config.schema import TsctlConfig
from tsctl.io import atomic
from tsctl.io.config_diff import config_changes
from tsctl.io.progress import console
from tsctl.io.run_identity import CONFIG_DIGEST, config_digest, config_values, place_problem, problem
from tsctl.io.run_lock import LOCK_FILE, RunBusy, RunLock, clean_temp
from tsctl.io.step_logs import parse

METRICS_GZ = "metrics.jsonl.gz"
"""A run record's metrics (:mod:`tsctl.io.run_records`): ``metrics.jsonl`` gzipped, read where ``metrics.jsonl`` is absent."""

SEEDS_FILE, ROLLOUTS_FILE = "seeds.parquet", "rollouts.parquet"
"""The shards ``tsctl seed`` and ``tsctl rollout`` write into :func:`shard_dir`."""


class RunError(RuntimeError):
    """A run folder cannot be used as asked (exists without resume, resume of nothing, ...)."""


ENDING_FIELDS = ("error", "failed_step", "nonfinite", "nonfinite_tensor", "signal", "interrupted_step", "checkpoint_step")
"""Manifest fields that describe how a run's last segment ended (``failed``: the error and, for a non-finite
value, :meth:`tsctl.trainer.nonfinite.NonFiniteError.manifest_fields`; ``interrupted``:
:meth:`tsctl.trainer.stop_signals.Interrupted.manifest_fields`); stale once the run trains again."""


def run_name(cfg: TsctlConfig) -> str:
    """``cfg.name`` or a name from the sweep knobs: ``ratio25-uniform-refresh10-seed0``."""
    if cfg.name:
        return cfg.name
    if not uses_seeds(cfg):
        return f"ratio0-seed{cfg.seed}"
    return f"ratio{cfg.ratio:g}-{cfg.truncation}-refresh{cfg.refresh}-seed{cfg.seed}"


def shard_dir(cfg: TsctlConfig) -> Path:
    """Where ``tsctl seed``/``tsctl rollout`` keep their shards: ``shards.out_dir``, or ``<runs_dir>/<experiment>/shards``."""
    return Path(cfg.shards.out_dir) if cfg.shards.out_dir else Path(cfg.runs_dir) / cfg.experiment / "shards"


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("tsctl", "torch", "transformers", "hydra-core", "vllm"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_revision() -> dict[str, str | bool | None]:
    """The manifest's ``git_revision`` (the commit of the code that runs, None outside a git checkout) and
    ``git_dirty``: True when tracked files differ from that commit (untracked files aside), None when unknown."""
    where = Path(__file__).parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=where)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    revision = (git("rev-parse", "HEAD") or "").strip() or None
    status = git("status", "--porcelain", "--untracked-files=no") if revision else None
    return {"git_revision": revision, "git_dirty": None if status is None else bool(status.strip())}


@dataclass
class RunDir:
    """Paths and bookkeeping of one run folder.

    Attributes:
        path: the folder.
        lock: the run's lock while this process holds it (:func:`open_run`), else None.
    """

    path: Path
    lock: RunLock | None = field(default=None, repr=False, compare=False)
    made: list[Path] = field(default_factory=list, repr=False, compare=False)
    """The folders :func:`open_run` created for this run (the run folder and the parents it lacked), deepest first."""

    def close(self, discard: bool = False) -> None:
        """Let the run's lock go (if held); with ``discard``, first remove the folders :func:`open_run` created for it (a new
        run whose start failed: nothing of it is worth keeping)."""
        if discard and self.lock is not None:
            _remove(self.made)
            self.made = []
        if self.lock is not None:
            self.lock.release()
            self.lock = None

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
        """Record ``status`` (running/completed/failed/interrupted) and ``extra`` fields in the manifest.

        ``running`` and ``completed`` drop the fields a previous ending left (:data:`ENDING_FIELDS`):
        a run resumed after a failure or a signal no longer carries that failure's error. Call only
        while holding the run's lock (:func:`open_run`).
        """
        data = self.manifest()
        if status in ("running", "completed"):
            for key in ENDING_FIELDS:
                data.pop(key, None)
        data.update(extra, status=status, updated=time.strftime("%Y-%m-%dT%H:%M:%S"))
        atomic.write_json(self.manifest_file, data)

    def mark_failed(self, error: str) -> str | None:
        """Status ``failed`` with ``error``, written under the run's lock; where another live process holds it
        (the failure was that the run is in use), nothing is written and the holder (``pid N on <host>``) is returned."""
        try:
            lock = RunLock.acquire(self.path)
        except RunBusy as holder:
            return str(holder)
        try:
            self.set_status("failed", error=error)
        finally:
            lock.release()
        return None

    def mark_running(self, **extra: Any) -> None:
        """Status ``running`` by this process (``pid``, ``host``), with ``extra`` fields."""
        self.set_status("running", pid=os.getpid(), host=socket.gethostname(), **extra)

    def append_metrics(self, record: dict[str, Any]) -> None:
        """Append one JSON line to ``metrics.jsonl`` and flush it to disk."""
        with atomic.writing(self.metrics_file), open(self.metrics_file, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()

    def read_metrics(self) -> list[dict[str, Any]]:
        """The intact records of ``metrics.jsonl`` (a damaged line is skipped, see :mod:`tsctl.io.step_logs`),
        or of a run record's :data:`METRICS_GZ` where the folder has no ``metrics.jsonl``.

        Raises:
            RunError: the gzipped metrics are damaged.
        """
        if self.metrics_file.is_file():
            data = self.metrics_file.read_bytes()
        elif (self.path / METRICS_GZ).is_file():
            data = gunzip_metrics(self.path)
        else:
            return []
        return parse(data)[0]


def gunzip_metrics(folder: Path) -> bytes:
    """The bytes of ``folder``'s :data:`METRICS_GZ`.

    Raises:
        RunError: the file is damaged (the fix: delete the folder and train that point again).
    """
    path = folder / METRICS_GZ
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as err:
        raise RunError(f"{path} is damaged ({err}); delete {folder} and train that point again") from None


def check_run(folder: Path) -> None:
    """Refuse a run folder whose config, manifest and records disagree or are missing or damaged (:func:`tsctl.io.run_identity.problem`).

    Raises:
        RunError: the one line naming what is wrong and how to recover.
    """
    if (found := problem(folder)) is not None:
        raise RunError(found)


def locate_run(cfg: TsctlConfig, node: DictConfig, command: str, unread: tuple[str, ...] = ()) -> RunDir:
    """The run folder of ``cfg``, checked against ``cfg.resume``; nothing is written. ``unread``: keys the run does
    not read (another engine's settings), which a resume may find changed.

    Raises:
        RunError: the folder may not hold this run (:func:`tsctl.io.run_identity.place_problem`: outside the runs folder,
            not a run, or a run whose config, manifest and records disagree), the run exists and resume is off,
            resume is on and there is no run, or resume is on and the saved config differs (the message lists
            each changed key, old -> new).
    """
    run = RunDir(Path(cfg.runs_dir) / cfg.experiment / run_name(cfg))
    if (found := place_problem(run.path, Path(cfg.runs_dir))) is not None:
        raise RunError(found)
    saved = run.path / "config.yaml"
    if saved.is_file():
        if not cfg.resume:
            raise RunError(
                f"run folder {run.path} already exists; continue it with `tsctl {command} ... resume=true`, "
                f"or choose another name=... or experiment=..."
            )
        changes = config_changes(OmegaConf.load(saved), node, ignored=unread)
        if changes:
            raise RunError(
                f"resume of {run.path} with a different config: {changes}; rerun with the saved values (see {saved}), "
                "or start a new run with another name=..."
            )
    elif cfg.resume:
        raise RunError(
            f"resume=true, but there is no run to resume at {run.path}; start it without resume=true "
            "(or check name=, experiment= and runs_dir=)"
        )
    return run


def open_run(cfg: TsctlConfig, node: DictConfig, command: str, unread: tuple[str, ...] = ()) -> RunDir:
    """Create the run folder for ``cfg``, or reopen it when ``cfg.resume`` is set, and take its lock (``unread`` as
    for :func:`locate_run`).

    The lock (``.lock``, see :mod:`tsctl.io.run_lock`) is held until :meth:`RunDir.close` or the
    process's end; holding it, temp files a killed process left in the run are deleted. A new run's
    manifest starts as ``running``; a reopened one's is left as it was until the caller, its start
    sound, calls :meth:`RunDir.mark_running`. A folder this call created is removed again if
    anything here fails, or by ``close(discard=True)`` if the caller's start fails.

    Raises:
        RunError: as :func:`locate_run`, or another live process holds the run.
        atomic.WriteError: the runs folder is read-only or the disk is full.
    """
    run = locate_run(cfg, node, command, unread)
    missing = [p for p in [run.path, *run.path.parents] if not p.exists()]  # deepest first
    created = run.path in missing
    place = next(p for p in [run.path, *run.path.parents] if p.exists())
    if not place.is_dir():
        raise RunError(f"{place} is a file, not a folder, so the run folder {run.path} cannot be made; point runs_dir=... at a folder "
                       "(or choose another experiment=... or name=...)")
    if not os.access(place, os.W_OK | os.X_OK):  # before the lock file is touched: a refused run stays as it was
        raise atomic.write_error(errno.EACCES, place)
    with atomic.writing(run.path):
        run.path.mkdir(parents=True, exist_ok=True)
    lock = None
    try:
        try:
            lock = RunLock.acquire(run.path)
        except RunBusy as busy:
            raise RunError(f"run {run.path} is in use by {busy}; wait for it to end (or stop it), then retry") from None
        locate_run(cfg, node, command, unread)  # again under the lock: another process may have created it meanwhile
        removed = clean_temp(run.path) if lock.held else []
        if removed:
            console.print(f"removed {len(removed)} temp file(s) an interrupted process left in {run.path}", highlight=False)
        if not (run.path / "config.yaml").is_file():
            text = OmegaConf.to_yaml(node, resolve=True)
            atomic.write_text(run.path / "config.yaml", text)
            run.set_status(
                "running",
                **{CONFIG_DIGEST: config_digest(config_values(text))},
                command=" ".join([command, *sys.argv[2:]]) if len(sys.argv) > 1 else command,
                created=time.strftime("%Y-%m-%dT%H:%M:%S"),
                versions=_versions(),
                **git_revision(),
            )
    except BaseException:
        if created:
            _remove(missing)
        if lock is not None:
            lock.release()
        raise
    run.lock, run.made = lock, missing if created else []
    return run


def _remove(made: list[Path]) -> None:
    """Remove a run folder this process made (``made[0]``) and the parents it made for it (the rest, deepest first) while empty."""
    if not made:
        return
    shutil.rmtree(made[0], ignore_errors=True)
    with contextlib.suppress(OSError):
        for folder in made[1:]:
            folder.rmdir()


@contextlib.contextmanager
def held(folder: Path, busy: str, make: bool = False) -> Iterator[None]:
    """Hold ``folder``'s lock (:mod:`tsctl.io.run_lock`) for the ``with`` block; with ``make``, create the folder first
    (and remove what this made again if the block fails while the folder holds nothing but the lock).

    Raises:
        RunError: another live process holds it; ``busy`` with ``{owner}`` filled in (``pid N on <host>``).
    """
    made = [p for p in [folder, *folder.parents] if not p.exists()] if make else []  # deepest first
    if make:
        with atomic.writing(folder):
            folder.mkdir(parents=True, exist_ok=True)
    try:
        lock = RunLock.acquire(folder)
    except RunBusy as owner:
        _remove(made)
        raise RunError(busy.format(owner=owner)) from None
    try:
        yield
    except BaseException:
        if made and all(p.name == LOCK_FILE for p in folder.iterdir()):
            _remove(made)
        raise
    finally:
        lock.release()
