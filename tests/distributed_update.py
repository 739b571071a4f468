"""One ``policy_update`` on a fixed batch, in one process or under ``torchrun`` (FSDP2 over gloo), and what it produced.

``tests/test_distributed.py`` runs :func:`update` in its own process and this file under
``torchrun --nproc_per_node=2 tests/distributed_update.py OUT SINGLE_CKPT``; rank 0 writes, for each case,
``OUT/<case>.pt`` with the update's metrics and the whole updated parameters, writes the sharded checkpoint
``OUT/<case>-ckpt/step-1``, and loads the one-process checkpoint ``SINGLE_CKPT`` into the sharded model
(``OUT/loaded-from-one.pt``: the whole parameters and AdamW moments the ranks then hold).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

from test_update import PAD, config, rows, tiny_model
from tsctl.distributed import world as ranks
from tsctl.distributed.fsdp import full_tensors
from tsctl.io.checkpoints import load_state
from tsctl.io.sharded_checkpoints import load_training_state, save_sharded_checkpoint
from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.forward import Forward
from tsctl.trainer.parallel import DataParallel, Parallel
from update_context import update as update_step
from update_context import update_context

CASES = {"ratio=0": 0, "ratio=25": 25}
"""Each case's ``ratio``: with 25 every third row continues a seed prefix (bounded by ``algo.prefix_clip_c``)."""

LR = 1e-4
"""Small enough that AdamW's sign-like step on near-zero gradients keeps float-order differences far below 1e-5
(at 1e-3 an element can drift by 1e-5), large enough that a wrong gradient direction moves weights by ~1e-4."""


class NoTokenizer:
    """The checkpoint writer's tokenizer argument: the micro model here has no tokenizer to save."""

    def save_pretrained(self, path: Path) -> None:
        del path


def setting(ratio: int) -> tuple[torch.nn.Module, Any, torch.Tensor, torch.Tensor, Any]:
    """The model, batch, pi_old, KL reference and config of a case: 10 rows in 3 mini-batches (4, 3, 3 rows) of
    one-row micro-batches, so the two ranks run 2 and 2, then 2 and 1 micro-batches; gradient clipping, KL and
    entropy terms on."""
    model = tiny_model()
    batch = collate(rows(10, prefix=ratio > 0), torch.linspace(-1.5, 1.0, 10), PAD)
    pi_old = Forward(1.0).recompute(model, batch)[0]
    old = pi_b_on_prefix(pi_old - 0.05 * torch.arange(pi_old.shape[1]) / pi_old.shape[1], batch)
    cfg = config(3, micro=1, kl_coef=0.05, entropy_coef=0.01)
    cfg.ratio, cfg.trainer.max_grad_norm = ratio, 0.5
    return model, batch, old, pi_old - 0.3, cfg


def update(ratio: int, parallel_of=Parallel) -> tuple[dict[str, float], torch.nn.Module, torch.optim.Optimizer, Parallel]:
    """One two-epoch ``policy_update`` of case ``ratio`` with AdamW; its metric means, the model, optimiser and split."""
    model, batch, old, ref, cfg = setting(ratio)
    cfg.trainer.epochs = 2
    parallel = parallel_of(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = update_step(update_context(cfg, model, optimizer, scheduler, parallel), batch, old, ref)
    return metrics.means(), model, optimizer, parallel


def full_moments(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """AdamW's whole ``exp_avg`` and ``exp_avg_sq`` per parameter name (a collective under FSDP)."""
    state = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))["state"]
    return {f"{name}/{key}": value.detach().clone() for name, entry in state.items() for key, value in entry.items() if key != "step"}


def main(out: Path, single_checkpoint: Path) -> None:
    world = ranks.start(cuda=False)
    assert world.size == 2, "run under torchrun --nproc_per_node=2"
    try:
        for case, ratio in CASES.items():
            means, model, optimizer, parallel = update(ratio, lambda m: DataParallel(m, world))
            params = dict(full_tensors(model))
            parallel.sync_engine(_NoEngine())
            save_sharded_checkpoint(out / f"{case}-ckpt", 1, model, optimizer, parallel.inference, NoTokenizer(), {"rng": {}})
            moments = full_moments(model, optimizer)
            inference = {k: v.clone() for k, v in parallel.inference.state_dict().items()}
            if world.main:
                torch.save({"metrics": means, "params": params, "moments": moments, "inference": inference}, out / f"{case}.pt")
        model = tiny_model()
        model.load_state_dict(torch.load(single_checkpoint / "weights.pt"))
        DataParallel(model, world)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
        torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)  # as the trainer's optimiser, whose groups hold initial_lr
        load_training_state(single_checkpoint, load_state(single_checkpoint), model, optimizer)
        params, moments = dict(full_tensors(model)), full_moments(model, optimizer)
        if world.main:
            torch.save({"params": params, "moments": moments}, out / "loaded-from-one.pt")
    except BaseException:
        ranks.stop(clean=False)
        raise
    ranks.stop()


class _NoEngine:
    """An engine that takes the synced weights and does nothing with them."""

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        del state


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
