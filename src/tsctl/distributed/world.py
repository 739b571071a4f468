"""The process's place among the ranks of a ``torchrun`` job, and the few collectives on Python objects it needs.

``torchrun --nproc_per_node=N`` (and ``srun torchrun ...`` on Slurm) starts ``N`` processes per node and
gives each ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; :func:`start` reads them and joins the process
group (:func:`backend`: ``gloo`` on CPU; on CUDA ``nccl`` for GPU tensors and ``gloo`` for CPU ones), once per process. A world of one process (no ``torchrun``,
or ``--nproc_per_node=1``) creates no process group: :data:`SINGLE`, and every collective here returns
its input.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

import torch
import torch.distributed as dist

from tsctl.config.errors import EnvSettingError

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    """This process's rank among ``size`` ranks (``local_rank``: among those of its node)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Whether this is rank 0, the one that writes the run's files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def block(self, count: int, rank: int | None = None) -> range:
        """The contiguous share of ``count`` items of ``rank`` (default: this one): near-equal blocks in rank
        order, the first ``count % size`` ranks one item more (``torch.tensor_split``'s split)."""
        rank = self.rank if rank is None else rank
        base, extra = divmod(count, self.size)
        start = rank * base + min(rank, extra)
        return range(start, start + base + (rank < extra))


SINGLE = World()
"""One process, no process group."""

_current = SINGLE


def from_env(env: Mapping[str, str] = os.environ) -> World:
    """The world ``torchrun`` describes in ``env`` (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``); :data:`SINGLE` outside it.

    Raises:
        EnvSettingError: one of them is not a whole number, or ``RANK`` is missing or outside ``0 .. WORLD_SIZE - 1``.
    """
    size = _whole(env, "WORLD_SIZE", "1")
    if size <= 1:
        return SINGLE
    rank = _whole(env, "RANK", None)
    if not 0 <= rank < size:
        raise EnvSettingError("RANK", str(rank), f"outside 0 .. WORLD_SIZE - 1 = {size - 1}; {_TORCHRUN}")
    return World(rank=rank, size=size, local_rank=_whole(env, "LOCAL_RANK", "0"))


_TORCHRUN = "torchrun sets RANK, WORLD_SIZE and LOCAL_RANK: unset them to run one process, or start with torchrun"


def _whole(env: Mapping[str, str], name: str, default: str | None) -> int:
    """The whole number ``env[name]`` (``default`` where unset)."""
    value = env.get(name, default)
    if value is None:
        raise EnvSettingError(name, "", f"unset while WORLD_SIZE={env.get('WORLD_SIZE')!r}; {_TORCHRUN}")
    if not value.strip().lstrip("-").isdigit():
        raise EnvSettingError(name, value, f"not a whole number; {_TORCHRUN}")
    return int(value)


def backend(cuda: bool) -> str:
    """The process group's backend. On CUDA, ``nccl`` carries GPU tensors (FSDP's collectives) and ``gloo`` the
    CPU tensors some collectives here carry (metric sums, evaluation counts), which ``nccl`` alone refuses."""
    return "cpu:gloo,cuda:nccl" if cuda else "gloo"


def start(cuda: bool) -> World:
    """Join the process group ``torchrun`` set up (:func:`backend` of ``cuda``); the world of this process.

    On CUDA the rank's device is ``cuda:LOCAL_RANK``. Outside ``torchrun`` nothing is created.
    """
    global _current
    world = from_env()
    if world.distributed and not dist.is_initialized():
        if cuda:
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group(backend(cuda))
    _current = world
    return world


def stop(clean: bool = True) -> None:
    """Leave the process group (if this process joined one).

    On a clean exit every rank first waits for the others (a barrier), so that none tears down its gloo
    connections while a peer is still finishing its last collective (the peer then aborts). After an error
    no rank waits: the others may never come, and ``torchrun`` stops them when this one exits. Then the
    actions given to :func:`before_leaving` run, and a rank that left waits :data:`GLOO_GRACE_S` before it may exit.

    Outside ``torchrun`` a process group may still exist: one vLLM engine in the process made its own (a world of
    one) and leaves it when the engine shuts down at exit; destroying it here would make that shutdown fail.
    """
    global _current
    joined = _current.distributed and dist.is_initialized()
    if joined and clean:
        dist.barrier()
    while _leaving:
        _leaving.pop()()
    if joined and dist.is_initialized():  # a vLLM engine's shutdown above may have left it already
        dist.destroy_process_group()
    if joined:
        time.sleep(GLOO_GRACE_S)  # the GIL released: gloo's workers drop their finished collectives now, not at exit
    _current = SINGLE


GLOO_GRACE_S = 0.5
"""Seconds :func:`stop` waits, the GIL released, after leaving the process group. A gloo worker thread destroys each
collective after the caller has seen it complete, and a collective holds its tensors, whose Python objects that thread
can release only under the GIL. The process group itself outlives :func:`stop` (DTensor's caches keep its device
mesh), so nothing joins those threads: a process that went straight on to exit could reach interpreter finalization
first, and the worker, taking the GIL then, ends the process with ``terminate called without an active exception``
(SIGABRT; its core shows ``~AsyncBarrierWork`` -> ``decref_pyobject`` -> ``take_gil`` -> ``pthread_exit``)."""


_leaving: list[Callable[[], None]] = []
"""What :func:`stop` runs before it leaves the process group, newest first."""


def before_leaving(action: Callable[[], None]) -> None:
    """Have :func:`stop` run ``action`` (after its barrier, before it leaves the group): for what was built on
    the job's process group and must be torn down while it exists (a vLLM engine, which then leaves it itself)."""
    _leaving.append(action)


def current() -> World:
    """The world :func:`start` joined (:data:`SINGLE` before or without it)."""
    return _current


def barrier() -> None:
    """Wait until every rank gets here."""
    if _current.distributed:
        dist.barrier()


def all_gather_objects(obj: T) -> list[T]:
    """``obj`` of every rank, in rank order (picklable objects)."""
    if not _current.distributed:
        return [obj]
    out: list[Any] = [None] * _current.size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: T) -> T:
    """Rank 0's ``obj`` on every rank."""
    if not _current.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """``tensor`` reduced over the ranks in place (``sum``, ``min`` or ``max``), and returned."""
    if _current.distributed:
        dist.all_reduce(tensor, op={"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op])
    return tensor
