"""A training run's lifecycle around its step loop: :class:`RunSession`.

``with RunSession(composed, world) as session:`` holds everything of a run that is not a step:

- before the block, writing nothing: the run folder checked (:func:`tsctl.io.runs.locate_run`: exists without resume,
  resume of nothing, a changed config, a folder that is not a run or a run whose config, manifest and records disagree)
  and the logger (:func:`tsctl.io.sinks.check_logger`);
- entering: SIGTERM and SIGINT end the start as an error does (:class:`~tsctl.trainer.stop_signals.StartSignals`); a
  resume takes the run's lock, then plans where it starts (:attr:`plan`, :mod:`tsctl.io.resume_plan`) and takes the
  arithmetic the run started with (:mod:`tsctl.io.rounding`);
- :meth:`check_same_data`: a resume of data other than the data the run started with (the manifest's ``data``) refused,
  before any model loads;
- :meth:`make_folder`: a new run's folder and lock, once the caller's model and data have loaded;
- :meth:`begin`: the resume plan applied to the step logs, the metric sink opened, the manifest ``running``, and from
  then on a signal only noted (:attr:`signals`, :class:`~tsctl.trainer.stop_signals.StopSignals`);
- leaving: a start that failed trained nothing (a new run's folder is removed, a resumed one's manifest stays as it
  was); after :meth:`begin` the manifest says ``completed``, ``interrupted`` (a signal,
  :class:`~tsctl.trainer.stop_signals.Interrupted`) or ``failed`` (the error); the sink is closed and the lock let go.

Under ``torchrun`` every rank holds a session; rank 0 alone creates, locks and writes the run folder.
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from tsctl.config.knobs import seeded_count
from tsctl.distributed import world as ranks
from tsctl.engines.factory import unread_keys
from tsctl.io import faults, rounding
from tsctl.io.progress import console
from tsctl.io.resume_plan import ResumePlan, plan_resume
from tsctl.io.runs import RunDir, RunError, locate_run, open_run
from tsctl.io.sinks import MetricsSink, check_logger
from tsctl.io.world_segments import with_segment, world_change
from tsctl.models.builtin import base_model_entry
from tsctl.models.loading import resolve_device
from tsctl.tasks.digests import data_changes, data_digests
from tsctl.trainer.nonfinite import NonFiniteError
from tsctl.trainer.stop_signals import Interrupted, StartSignals, StopSignals

if TYPE_CHECKING:
    from tsctl.config.compose import Composed

T = TypeVar("T")


class RunSession:
    """The lock, resume plan, manifest, metric sink and signal handlers of one training run (module docstring).

    Attributes:
        run: the run folder (on rank 0 holding its lock from a resume's start, or from :meth:`make_folder`).
        plan: where the run starts (set on entering).
        signals: the step loop's signal handlers (set by :meth:`begin`; None while the run starts).

    Raises:
        RunError, LoggerError, EnvSettingError: the folder may not be used as asked, or wandb would not start.
    """

    plan: ResumePlan

    def __init__(self, composed: Composed, world: ranks.World) -> None:
        self.cfg, self._node, self._world = composed.cfg, composed.node, world
        self._unread = tuple(unread_keys(self.cfg.engine.name))  # another engine's settings: a resume may find them changed
        self.run = locate_run(self.cfg, self._node, "train", self._unread)
        check_logger(self.cfg.logger)  # what would stop wandb, before any run folder
        self._device = resolve_device(self.cfg.model.device)
        self.signals: StopSignals | None = None
        self._handlers: StartSignals | StopSignals = StartSignals()
        self._sink: MetricsSink | None = None
        self._recorded: dict[str, Any] | None = None

    @property
    def start(self) -> int:
        """The first step to train: the resume's checkpoint step, 0 for a new run."""
        return self.plan.start[0] if self.plan.start else 0

    def __enter__(self) -> RunSession:
        self._handlers.__enter__()
        try:
            if self.cfg.resume:  # a resume holds the run's lock before it reads where to start: another process may be training it
                self._claim()
            self.plan = plan_resume(self.run.path, self.cfg.trainer.eval_every > 0)
            faults.hit("resume-planned")
            self._recorded = self.run.manifest().get("arithmetic") if self.cfg.resume else None
            rounding.resume_as_started(self._recorded, self._device)  # even from step 0: the killed start's seed shard is reused
        except BaseException as err:
            self.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def check_same_data(self) -> None:
        """On a resume, refuse data other than what the run started with (the manifest's ``data``: its digests, compared by
        :func:`~tsctl.tasks.digests.data_changes`) in one line naming what changed; otherwise :meth:`begin` would record
        the new digests and the run go on as if it had trained on this data from its start.

        Raises:
            RunError: the data changed since the run started.
        """
        if not self.cfg.resume:
            return
        changes = data_changes(self.run.manifest().get("data"), data_digests(self.cfg.task))
        if not changes:
            return
        start = f" (with model.path={self.plan.start[1]} it starts from this run's last checkpoint)" if self.plan.start else ""
        raise RunError(f"resume of {self.run.path}: its data changed since the run started: {'; '.join(changes)} (manifest.json's data "
                       f"records what it trained on); put that data back, or train on this data as a new run under another name=...{start}")

    def make_folder(self) -> None:
        """Create and lock a new run's folder (rank 0, then the others); a resume holds its folder already."""
        if not self.cfg.resume:
            self._claim()
            faults.hit("run-folder-made")

    def begin(self, base: str) -> StopSignals:
        """Apply the resume plan to the step logs, open the metric sink and mark the run ``running`` (``base``: the model it
        started from), then only note signals; the step loop's signal handlers."""
        cfg, world = self.cfg, self._world
        if world.main:
            kept = self.plan.apply()  # the step logs as the resume leaves them; damaged lines set aside
            if cfg.resume:
                console.print(f"resume: {kept}", highlight=False, soft_wrap=True)
            started = {} if self._recorded else {"arithmetic": rounding.current(self._device)}  # a resumed run keeps what it started with
            before = self.run.manifest() if cfg.resume else {}
            if (note := world_change(before, self.start, world.size)) is not None:
                console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
            self._sink = MetricsSink(self.run, cfg.logger, self._node)
            self.run.mark_running(started_step=self.start, base_model=base_model_entry(cfg, base), data=data_digests(cfg.task), **started,
                                  seeded_per_group=seeded_count(cfg),
                                  **with_segment(before, self.start, world.size))
        self._handlers.__exit__(None, None, None)
        self._handlers = StopSignals(cfg.trainer.steps, cfg.trainer.checkpoint_on_signal).__enter__()
        self.signals = self._handlers
        return self.signals

    def log(self, record: dict[str, Any]) -> bool:
        """Log a step's ``record`` where this rank has the metric sink (rank 0); whether it did."""
        if self._sink is None:
            return False
        self._sink.log(record)
        return True

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, trace: TracebackType | None) -> None:
        self._handlers.__exit__(kind, err, trace)
        if self.signals is None:  # this start trained nothing: a resumed run's manifest stays as it was, a new run's folder goes
            self._close_sink()
            self.run.close(discard=not self.cfg.resume)
            return
        if err is None:
            self._close_sink()
            if self._world.main:
                self.run.set_status("completed", finished_step=self.cfg.trainer.steps)
            self.run.close()
            return
        if self._world.main:
            status, fields = _ending(err)
            with contextlib.suppress(OSError):  # a full disk may refuse the manifest too
                self.run.set_status(status, **fields)
        self.run.close()
        self._close_sink()

    def _claim(self) -> None:
        """Take the run folder: create (or reopen) and lock it on rank 0, before the other ranks go on."""
        self.run = rank_0_first(lambda: open_run(self.cfg, self._node, "train", self._unread) if self._world.main else self.run)

    def _close_sink(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None


def _ending(err: BaseException) -> tuple[str, dict[str, Any]]:
    """The manifest's status and fields for a run ended by ``err``: ``interrupted`` by a signal, else ``failed``."""
    if isinstance(err, Interrupted):
        return "interrupted", err.manifest_fields()
    details = err.manifest_fields() if isinstance(err, NonFiniteError) else {}
    return "failed", {"error": f"{type(err).__name__}: {err}", **details}


def rank_0_first(action: Callable[[], T]) -> T:
    """``action()`` on rank 0, then on the other ranks (one process: just ``action()``)."""
    if ranks.current().main:
        out = action()
        ranks.barrier()
        return out
    ranks.barrier()
    return action()
