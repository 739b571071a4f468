"""Save a step's checkpoint and resume from one, in one process or across the ranks of a ``torchrun`` job.

One process writes the format of :mod:`tsctl.io.checkpoints` (the HF folder and ``trainer_state.pt``
with the optimiser state), exactly as before ranks existed. Several ranks write that of
:mod:`tsctl.io.sharded_checkpoints` (the same HF folder from the full copy of the weights, the model
and optimiser shards in torch.distributed.checkpoint, each rank's RNG). Either resumes on any number of ranks.
"""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedTokenizerBase

from tsctl.distributed.world import barrier
from tsctl.io.checkpoints import load_state, prune_checkpoints, rng_state, save_checkpoint
from tsctl.io.sharded_checkpoints import load_training_state, restore_rng, save_sharded_checkpoint
from tsctl.trainer.context import StepContext


def resume(ctx: StepContext, path: Path) -> None:
    """Restore the optimiser (and, from a checkpoint written by several ranks, the weights' shards), the
    scheduler, this rank's RNG states and the non-finite skips saved with checkpoint ``path``."""
    state = load_state(path)
    load_training_state(path, state, ctx.model, ctx.optimizer)
    ctx.scheduler.load_state_dict(state["scheduler"])
    restore_rng(path, state)
    ctx.guard.skips = state.get("nonfinite_skips", 0)


def checkpoint(ctx: StepContext, tokenizer: PreTrainedTokenizerBase, folder: Path, done: int) -> None:
    """Save checkpoint ``step-<done>`` with the state a resume needs, then prune older ones (sparing open
    seed windows'). Under ``torchrun`` every rank calls it; rank 0 prunes."""
    state = {"scheduler": ctx.scheduler.state_dict(), "rng": rng_state(), "nonfinite_skips": ctx.guard.skips}
    parallel = ctx.parallel
    if parallel.world.distributed:
        save_sharded_checkpoint(folder, done, ctx.model, ctx.optimizer, parallel.inference, tokenizer, state)
    else:
        save_checkpoint(folder, done, ctx.model, tokenizer, {"optimizer": ctx.optimizer.state_dict(), **state})
    if parallel.world.main:
        prune_checkpoints(folder, ctx.cfg.trainer.keep_checkpoints, protect=ctx.seeds.keep(done) if ctx.seeds is not None else set())
    barrier()
