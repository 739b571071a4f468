"""One ``policy_update`` of a LoRA policy on a fixed batch, in one process or under ``torchrun`` (FSDP2 over gloo).

``tests/test_distributed_lora.py`` runs :func:`lora_update` in its own process and this file under
``torchrun --nproc_per_node=2 tests/distributed_lora_update.py OUT SINGLE_CKPT``. Every rank ``r`` writes
``OUT/rank<r>.pt``: the update's metrics, the whole parameters gathered from the shards (adapter and base), its
own full sampling copy after the weight sync, the KL reference's log-probs [B, T] taken before the update, and
the whole AdamW moments; the ranks write the sharded checkpoint ``OUT/ckpt/step-1``, and load the one-process
checkpoint ``SINGLE_CKPT`` (its adapter folder and ``trainer_state.pt``) into a sharded policy
(``OUT/loaded-from-one.pt``: rank 0's whole adapter and moments then).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from distributed_update import LR, NoTokenizer, full_moments, setting
from tsctl.config.schema import LoraConfig
from tsctl.distributed import world as ranks
from tsctl.distributed.fsdp import full_tensors, local_tensor
from tsctl.io.checkpoints import load_state
from tsctl.io.sharded_checkpoints import load_training_state, save_sharded_checkpoint
from tsctl.models.forward import Forward
from tsctl.models.lora import add_adapter, load_adapter_weights, trainable_parameters
from tsctl.trainer.parallel import DataParallel, Parallel
from tsctl.trainer.reference import load_reference, reference_logprobs
from update_context import update as update_step
from update_context import update_context

SETTINGS = LoraConfig(rank=4, alpha=8.0)
BASE = "base-folder"
"""The base model an adapter of these tests names."""


class RecordingEngine:
    """An engine that keeps the state dict of the last weight sync."""

    def __init__(self) -> None:
        self.state: dict[str, torch.Tensor] = {}

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.state = {name: tensor.detach().clone() for name, tensor in state.items()}


def lora_policy(ratio: int = 25) -> tuple[torch.nn.Module, Any, torch.Tensor, torch.Tensor, Any]:
    """The setting of :func:`distributed_update.setting` (10 rows, 3 mini-batches, clipping, KL and entropy) with an
    adapter over the tiny Llama whose every ``lora_B`` [out, r] is random, so both ``A`` and ``B`` get gradients."""
    model, batch, old, ref, cfg = setting(ratio)
    add_adapter(model, SETTINGS, BASE, seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model, batch, old, ref, cfg


def lora_update(parallel_of=Parallel) -> tuple[dict[str, float], torch.nn.Module, torch.optim.Optimizer, Parallel, torch.Tensor]:
    """One ``policy_update`` (3 optimiser steps) of the LoRA policy with AdamW over its adapter.

    Returns the metric means, the model, optimiser and split, and the KL reference's log-probs [B, T] (the policy
    with its adapter off, taken through the split before the update).
    """
    model, batch, old, ref, cfg = lora_policy()
    parallel = parallel_of(model)
    reference = load_reference(cfg, BASE, parallel.inference)
    mine = parallel.world.block(len(batch.resp_mask))
    parallel.rows = range(mine.start, mine.stop)  # this rank's rows, as if it had sampled them
    base_logprobs = parallel.map_rows(lambda rows: (reference_logprobs(reference, rows, Forward(1.0), "policy"),), batch)[0]
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=LR)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    metrics = update_step(update_context(cfg, model, optimizer, scheduler, parallel), batch, old, ref)
    return metrics.means(), model, optimizer, parallel, base_logprobs


def main(out: Path, single_checkpoint: Path) -> None:
    world = ranks.start(cuda=False)
    assert world.size == 2, "run under torchrun --nproc_per_node=2"
    try:
        means, model, optimizer, parallel, base_logprobs = lora_update(lambda m: DataParallel(m, world))
        params = dict(full_tensors(model))
        engine = RecordingEngine()
        parallel.sync_engine(engine)
        moments = full_moments(model, optimizer)
        save_sharded_checkpoint(out / "ckpt", 1, model, optimizer, parallel.inference, NoTokenizer(), {"rng": {}})
        torch.save(
            {"metrics": means, "params": params, "engine": engine.state, "reference": base_logprobs, "moments": moments,
             "trainable": sorted(name for name, p in model.named_parameters() if p.requires_grad),
             "optimised": sum(local_tensor(p).numel() for group in optimizer.param_groups for p in group["params"])},
            out / f"rank{world.rank}.pt",
        )
        model = lora_policy()[0]
        load_adapter_weights(model, single_checkpoint)
        DataParallel(model, world)
        optimizer = torch.optim.AdamW(trainable_parameters(model), lr=LR)
        torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)  # as the trainer's optimiser, whose groups hold initial_lr
        load_training_state(single_checkpoint, load_state(single_checkpoint), model, optimizer)
        adapter, moments = dict(full_tensors(model, frozen=False)), full_moments(model, optimizer)
        if world.main:
            torch.save({"adapter": adapter, "moments": moments}, out / "loaded-from-one.pt")
    except BaseException:
        ranks.stop(clean=False)
        raise
    ranks.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
