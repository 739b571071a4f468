"""SIGTERM and SIGINT as a checkpoint: a signalled run stops at the end of its current step.

SIGTERM is how Slurm preempts a job and how ``timeout`` stops one; SIGINT is Ctrl-C. During a run's start,
before its step-0 evaluation (:class:`StartSignals`), either ends the start at once as an error does
(:class:`StartInterrupted`): nothing was trained, so a new run's folder is removed and a resumed one's manifest
stays as it was. While the step-0 evaluation and the step loop run (:class:`StopSignals`), the first of
either is only noted: the step under way is finished,
not abandoned, because a finished step is exactly the step an uninterrupted run takes (its samples,
update and metrics record), whereas an abandoned one would have to be undone. At the step's end the
run saves a checkpoint of it where its newest is older (``trainer.checkpoint_on_signal``), its
manifest says ``interrupted`` with the signal's name, and ``tsctl train`` exits with 128 + the
signal's number after one line saying how to resume. A signal during the last step lets the run
complete. Later signals change nothing: one job often gets the same signal twice (Slurm signals
every process of a job, and ``torchrun`` forwards what it gets to its ranks; Ctrl-C reaches the
whole process group), so none of them may cut the checkpoint short. SIGKILL stops a run at once (its
resume then starts from its last checkpoint).

Under ``torchrun`` (which forwards SIGTERM to every rank) the ranks agree at each step's end, by
an all-reduce of the signal each has noted, so every rank stops after the same step and takes part
in the same checkpoint; none waits for a peer that went on. ``torchrun`` kills its ranks 30 s after
forwarding the signal (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` where the installed torch reads it): a
step and its checkpoint that take longer end there, and the job resumes from its last checkpoint.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable

import torch

from tsctl.distributed.world import all_reduce

CAUGHT = (signal.SIGTERM, signal.SIGINT)
"""The signals a training run turns into a checkpoint and a clean exit."""


class Interrupted(BaseException):
    """A run stopped on a signal at a step's end (a ``BaseException``, as ``KeyboardInterrupt``: no
    handler of ordinary errors may take it for a failure).

    Attributes:
        signum: the signal.
        step: the last step finished.
        checkpoint: the newest checkpoint's step, where the resume starts (0: none).
    """

    def __init__(self, signum: int, step: int, checkpoint: int) -> None:
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        saved = f"checkpoint step-{checkpoint}" if checkpoint else "no checkpoint yet"
        super().__init__(
            f"{signal.Signals(signum).name}: stopped after step {step} ({saved}); "
            "resume with the same command and resume=true"
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process ended by it."""
        return 128 + self.signum

    def manifest_fields(self) -> dict[str, Any]:
        """What the manifest records besides the status ``interrupted``."""
        return {"signal": signal.Signals(self.signum).name, "interrupted_step": self.step, "checkpoint_step": self.checkpoint}


class StartInterrupted(BaseException):
    """SIGTERM or SIGINT during a run's start: nothing was trained (a ``BaseException``, as ``KeyboardInterrupt``).

    Attributes:
        signum: the signal.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"{signal.Signals(signum).name} during the start, before any step: nothing was trained (a new run leaves no "
                         "folder, a resumed one's manifest is as it was); rerun the same command")

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process ended by it."""
        return 128 + self.signum


class _Handled:
    """Calls :meth:`_handle` on SIGTERM and SIGINT while the ``with`` block runs in the main thread (elsewhere signals
    keep their handlers: only the main thread may set them); the handlers before it are put back after."""

    _before: dict[int, Any]

    def __enter__(self) -> Any:
        self._before = {s: signal.signal(s, self._handle) for s in CAUGHT} if threading.current_thread() is threading.main_thread() else {}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._before.items():
            signal.signal(s, handler)
        self._before = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise NotImplementedError


class StartSignals(_Handled):
    """Turns SIGTERM and SIGINT into :class:`StartInterrupted` during a run's start, so that the start's error handling runs."""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise StartInterrupted(signum)


class StopSignals(_Handled):
    """Notes SIGTERM and SIGINT while the step-0 evaluation and the step loop run.

    Args:
        steps: the run's last step (a signal during it lets the run complete).
        save_on_signal: whether a stop saves a checkpoint of its step (``trainer.checkpoint_on_signal``).
    """

    def __init__(self, steps: int, save_on_signal: bool) -> None:
        self.steps, self.save_on_signal = steps, save_on_signal
        self.noted = 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.noted = self.noted or signum

    def check(self, done: int, saved: int, save: Callable[[], None]) -> None:
        """At the end of step ``done`` (the newest checkpoint: step ``saved``, 0 for none), on every rank:
        when any rank was signalled, save step ``done`` (if configured and ``saved < done``) and raise
        :class:`Interrupted`.

        Raises:
            Interrupted: a rank was signalled and ``done`` is not the last step.
        """
        agreed = int(all_reduce(torch.tensor([self.noted], dtype=torch.int64), "max").item())
        if not agreed or done >= self.steps:
            return
        if self.save_on_signal and saved < done:
            save()
            saved = done
        raise Interrupted(agreed, done, saved)
