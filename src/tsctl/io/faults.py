"""Fault injection for the kill-and-resume tests: SIGKILL this process at an exact point.

``TSCTL_KILL_AT=<point>:<n>`` kills the process (SIGKILL, no cleanup, as the OOM killer or a
scheduler would) the ``n``-th time the code reaches :func:`hit` with that point's name. Unset (the
normal case) :func:`hit` returns at once. ``TSCTL_KILL_SIGNAL=TERM`` (or ``INT``) sends that signal
instead, as Slurm or ``timeout`` would, and the code goes on to handle it; ``STOP`` pauses the
process there until it gets SIGCONT, so a test can race another command against it. Points:

- ``shard-written``: a shard file is in place, its ``.sha256`` not yet (:mod:`tsctl.io.shards`);
- ``checkpoint-partial``: a checkpoint's weights are in its temp folder, its trainer state not yet
  (:mod:`tsctl.io.checkpoints`);
- ``sweep-locked``: ``tsctl ablate`` holds its sweep's lock, no point started yet (:mod:`tsctl.stages.ablate`);
- ``resume-planned``: a resume holds its run's lock and has chosen its checkpoint, loaded nothing yet (:mod:`tsctl.stages.train`);
- ``step-sampled``: a step's samples are drawn, its update not yet (:mod:`tsctl.trainer.step`);
- ``step-logged``: a step's metrics line is written, its checkpoint (if any) not yet (:mod:`tsctl.stages.train`).
"""

from __future__ import annotations

import collections
import os
import signal

ENV = "TSCTL_KILL_AT"
SIGNAL_ENV = "TSCTL_KILL_SIGNAL"

_hits: collections.Counter[str] = collections.Counter()


def hit(point: str) -> None:
    """Count one passage through ``point``; signal the process (SIGKILL unless ``TSCTL_KILL_SIGNAL`` names
    another) on the passage ``TSCTL_KILL_AT`` names."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    name, _, count = spec.rpartition(":")
    if not name or not count.isdigit() or int(count) < 1:
        raise ValueError(f"{ENV}={spec!r}: expected <point>:<n> with n >= 1, e.g. shard-written:1")
    if name != point:
        return
    _hits[point] += 1
    if _hits[point] == int(count):
        os.kill(os.getpid(), signal.Signals["SIG" + os.environ.get(SIGNAL_ENV, "KILL")])
