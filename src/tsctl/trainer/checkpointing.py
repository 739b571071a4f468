"""A step's checkpoint in the run folder: the learner's, then the older ones pruned, in one process or across ranks.

The checkpoint itself, and the resume from one, are the learner's (:meth:`tsctl.trainer.learner.Learner.save`
and :meth:`~tsctl.trainer.learner.Learner.load`): one process writes the format of :mod:`tsctl.io.checkpoints`
(the HF folder and ``trainer_state.pt`` with the optimiser state), several ranks that of
:mod:`tsctl.io.sharded_checkpoints`; either resumes on any number of ranks.
"""

from __future__ import annotations

from pathlib import Path

from tsctl.distributed.world import barrier
from tsctl.io.checkpoints import prune_checkpoints
from tsctl.trainer.context import StepContext


def checkpoint(ctx: StepContext, folder: Path, done: int) -> None:
    """Save checkpoint ``step-<done>`` of the run ``ctx`` with the state a resume needs, then prune older ones (sparing
    open seed windows'). Under ``torchrun`` every rank calls it; rank 0 prunes."""
    ctx.learner.save(folder, done)
    if ctx.learner.parallel.world.main:
        prune_checkpoints(folder, ctx.cfg.trainer.keep_checkpoints, protect=ctx.seeds.keep(done) if ctx.seeds is not None else set())
    barrier()
