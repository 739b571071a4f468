"""What one sweep point may use when a launcher runs several at once on one machine: its own GPU, its share of cores.

With ``hydra/launcher=joblib hydra.launcher.n_jobs=N`` the points run in N worker processes. Left alone,
every worker would put its model on ``cuda:0`` and start torch with one thread per core (N x cores
threads on the cores: on CPU a step then runs up to 10x slower). So, before the point touches CUDA,
:func:`pin_job`:

- **GPU.** The worker claims the first free slot among the machine's GPUs (``CUDA_VISIBLE_DEVICES`` if
  set, else every GPU NVML sees) with a lock file in ``<sweep>/.gpu-slots/`` held for the worker's life,
  and sets ``CUDA_VISIBLE_DEVICES`` to that GPU alone: N workers, N different GPUs. A worker keeps its
  GPU for every later point it runs (CUDA, once started, cannot move). More jobs than GPUs: the extra
  workers share round-robin (``Pinning.shares``).
- **Threads.** ``torch.set_num_threads(cores // N)`` (at least 1) for the point's whole run;
  ``TSCTL_THREADS_PER_JOB=<k>`` sets ``k`` instead. The count never changes during a run, even when a
  point is left alone at the end of a sweep: the thread count decides how a matmul splits its sums, and
  a run at two threads drifts away from the same run at one (:mod:`tsctl.io.rounding`), so a point's
  numbers must not depend on when the other points end.

One job at a time (the default launcher, ``n_jobs=1``) pins nothing: a sequential sweep runs exactly as
``tsctl train`` would.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping

import torch

THREADS_ENV = "TSCTL_THREADS_PER_JOB"
"""Environment variable: CPU threads of each point of a parallel sweep (default: cores // jobs)."""

PINNED_ENV = "TSCTL_PINNED_GPU"
"""Set in a worker once it has claimed its GPU (later points of the worker keep it)."""

POINTS_ENV = "TSCTL_SWEEP_POINTS"
"""Set by ``tsctl ablate`` for its workers: how many points the sweep has (no more run at once)."""

SLOTS_DIR = ".gpu-slots"
"""Folder of a sweep holding one lock file per GPU slot."""

_held: list[IO[bytes]] = []
"""This worker's claimed slot (its lock is held while the file stays open)."""


@dataclass(frozen=True)
class Pinning:
    """What a point of a parallel sweep runs with: ``gpu`` (None: no GPU to pin), whether it ``shares`` it with
    another worker (more jobs than GPUs), and ``threads``."""

    gpu: str | None
    shares: bool
    threads: int


def parallel_jobs(launcher: Mapping[str, object], points: int) -> int:
    """How many of ``points`` run at once under Hydra launcher config ``launcher`` (joblib's ``n_jobs``, whose
    negative values count back from the cores as joblib's do: -1 one per core); 1 for any other launcher."""
    n_jobs = launcher.get("n_jobs")
    if not isinstance(n_jobs, int):
        return 1
    if n_jobs < 0:
        n_jobs = (os.cpu_count() or 1) + 1 + n_jobs
    return max(1, min(n_jobs, points))


def visible_gpus(env: Mapping[str, str] = os.environ) -> list[str]:
    """The GPUs this machine lets the sweep use, without starting CUDA: ``CUDA_VISIBLE_DEVICES``, else NVML's count."""
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]  # NVML: does not initialise CUDA


def threads_per_job(jobs: int, env: Mapping[str, str] = os.environ, cores: int | None = None) -> int:
    """CPU threads for each of ``jobs`` concurrent points: ``TSCTL_THREADS_PER_JOB``, else cores // jobs (at least 1)."""
    value = env.get(THREADS_ENV)
    if value is not None:
        if not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"{THREADS_ENV}={value!r}: expected a whole number of threads >= 1, e.g. {THREADS_ENV}=2")
        return int(value)
    return max(1, (cores or os.cpu_count() or 1) // jobs)


def claim_gpu(sweep: Path, gpus: list[str]) -> tuple[str, bool]:
    """Hold the first free slot of ``gpus`` (a lock in ``sweep/.gpu-slots``) for this process's life; its GPU and
    whether it is shared: when every slot is taken (more jobs than GPUs) the process takes slot
    ``pid % len(gpus)`` without a lock."""
    folder = sweep / SLOTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for index, gpu in enumerate(gpus):
        handle = open(folder / f"{index}.lock", "wb")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        _held.append(handle)
        return gpu, False
    return gpus[os.getpid() % len(gpus)], True


def pin_job(jobs: int, sweep: Path) -> Pinning | None:
    """Pin this worker as the module docstring says when the launcher runs ``jobs`` points of ``sweep`` at
    once; None (nothing done) for one."""
    if jobs <= 1:
        return None
    gpu, shares = os.environ.get(PINNED_ENV), False  # an earlier point of this worker claimed it
    if gpu is None:
        gpus = visible_gpus()
        if gpus:
            gpu, shares = claim_gpu(sweep, gpus)
            os.environ["CUDA_VISIBLE_DEVICES"] = os.environ[PINNED_ENV] = gpu
    threads = threads_per_job(jobs)
    torch.set_num_threads(threads)
    return Pinning(gpu, shares, threads)
