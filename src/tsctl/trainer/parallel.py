"""How a step spreads over the ranks of a ``torchrun`` job: :class:`Parallel` (one process) and :class:`DataParallel`.

One process (:class:`Parallel`): every method is what the loop did before there were ranks (the
identity), so a plain ``tsctl train`` computes exactly what it always did.

``torchrun --nproc_per_node=W`` (:class:`DataParallel`), the semantics of one step:

- **Groups.** Rank ``r`` samples the contiguous block ``r`` of the step's prompts (near-equal blocks
  in rank order, :meth:`~tsctl.distributed.world.World.block`): whole groups, so group advantages need
  no communication. Its engine samples with its own stream (:func:`~tsctl.config.rng.rank_seed`).
- **The global batch.** Every rank's samples are all-gathered (token ids, sources, pi_b log-probs,
  the engine's log-probs, rewards: :meth:`gather_samples`), so every rank packs the same global batch
  in the same order as one process would, and computes the same advantages and rollout metrics.
  No-grad forwards over the batch (pi_old recomputed, the KL reference) run on each rank's own rows
  and are all-gathered (:meth:`map_rows`).
- **The update.** The same shuffle on every rank splits the global batch into the mini-batches of one
  process; each rank trains on its block of every mini-batch (:meth:`share`), every loss divided by
  the global mini-batch's token count; FSDP2 sums the gradients (:mod:`tsctl.distributed.fsdp`), so
  the gradient, its norm (a DTensor norm) and the step equal one process's on the same batch up to
  float summation order. The non-finite guard sees the all-reduced loss and the global norm, so
  every rank takes the same decision; metric sums are all-reduced (``MetricSums.all_reduce``).
- **Weights for sampling.** Each rank keeps one full copy of the weights in the compute dtype (bf16
  on GPU, float32 on CPU; :attr:`inference`): the ``hf`` engine samples with it and every no-grad
  forward runs on it (no collective, so ranks may run different numbers of them). After each update
  the FSDP shards are gathered with ``full_tensor()``, one tensor at a time, into it, and the engine
  loads it (:meth:`sync_engine`; vLLM gets it cast to its dtype, as on one GPU). With ``model.lora`` only the
  adapter is gathered (the base weights are frozen, the copy's never go stale); the ``hf`` engine decodes the
  copy with the adapter merged, vLLM loads the adapter alone. The KL reference is this copy with its adapter off.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable, ContextManager, Sequence

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from tsctl.config.rng import rank_seed
from tsctl.distributed import fsdp
from tsctl.distributed.world import World, SINGLE, all_gather_objects
from tsctl.engines.base import Engine
from tsctl.models.batch import RolloutBatch
from tsctl.models.samples import Sample

Rows = Callable[[RolloutBatch], Sequence[torch.Tensor | None]]
"""A no-grad computation over a batch's rows: tensors ``[b, t]`` (``t`` up to the batch's width), or None."""


class Parallel:
    """One process: the model trains and samples as it is.

    Attributes:
        model: the policy being trained.
        inference: the model no-grad forwards and the ``hf`` engine use (``model`` itself here).
        world: :data:`~tsctl.distributed.world.SINGLE`.
        rows: this rank's rows of the step's gathered samples (all of them here).
    """

    world: World = SINGLE

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.inference = model
        self.rows = range(0)

    def sampling_seed(self, seed: int) -> int:
        """The seed this rank samples with in place of ``seed``."""
        return rank_seed(seed, self.world.rank)

    def gather_samples(self, samples: list[Sample]) -> list[Sample]:
        """Every rank's samples, in rank order (this rank's are :attr:`rows` of them)."""
        self.rows = range(len(samples))
        return samples

    def map_rows(self, fn: Rows, batch: RolloutBatch) -> tuple[torch.Tensor | None, ...]:
        """``fn`` over ``batch`` ([B, T] results), each rank computing its :attr:`rows`."""
        return tuple(fn(batch))

    def share(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's block of a mini-batch's ``rows``."""
        return rows

    def forward(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(model, *args, **kwargs)``, the training forward."""
        return fn(self.model, *args, **kwargs)

    def accumulating(self) -> ContextManager[None]:
        """The micro-batches of one mini-batch run inside this."""
        return contextlib.nullcontext()

    def reduce_gradients(self, probe: Callable[[torch.nn.Module], torch.Tensor]) -> None:
        """After a mini-batch's micro-batches: make the gradients the whole mini-batch's (nothing to do here)."""

    def sync_engine(self, engine: Engine) -> None:
        """Give ``engine`` the weights of the update just made."""
        engine.load_weights(self.model.state_dict())


class DataParallel(Parallel):
    """``model`` sharded with FSDP2 over ``world`` (see the module docstring); built before the optimiser.

    Args:
        model: the policy, full, float32, on this rank's device; sharded in place.
        world: the ranks (more than one).
        param_dtype: the dtype units compute in (bf16 on CUDA), None for float32.
    """

    def __init__(self, model: PreTrainedModel, world: World, param_dtype: torch.dtype | None = None) -> None:
        super().__init__(model)
        self.world = world
        self.inference = copy.deepcopy(model).eval().requires_grad_(False)
        if param_dtype is not None:  # what the forwards compute in anyway: half the memory of fp32 on GPU
            self.inference.to(param_dtype)
        self.root = fsdp.shard(model, world, next(model.parameters()).device.type, param_dtype)

    def gather_samples(self, samples: list[Sample]) -> list[Sample]:
        parts = all_gather_objects(samples)
        start = sum(len(p) for p in parts[: self.world.rank])
        self.rows = range(start, start + len(samples))
        return [s for part in parts for s in part]

    def map_rows(self, fn: Rows, batch: RolloutBatch) -> tuple[torch.Tensor | None, ...]:
        width = batch.resp_mask.shape[1]
        mine = None
        if len(self.rows):
            out = fn(batch.rows(torch.arange(self.rows.start, self.rows.stop)))
            mine = tuple(None if t is None else F.pad(t, (0, width - t.shape[1])).cpu() for t in out)
        parts = [p for p in all_gather_objects(mine) if p is not None]
        return tuple(None if t is None else torch.cat([p[i] for p in parts]).to(batch.device) for i, t in enumerate(parts[0]))

    def share(self, rows: torch.Tensor) -> torch.Tensor:
        block = self.world.block(len(rows))
        return rows[block.start : block.stop]

    def forward(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.root(fn, *args, **kwargs)

    def accumulating(self) -> ContextManager[None]:
        return fsdp.accumulating(self.root)

    def reduce_gradients(self, probe: Callable[[torch.nn.Module], torch.Tensor]) -> None:
        fsdp.reduce_gradients(self.root, probe)

    def sync_engine(self, engine: Engine) -> None:
        own = self.inference.state_dict()
        with torch.no_grad():
            # one whole tensor at a time, never the whole model twice; frozen weights (a LoRA policy's base) never change
            for name, tensor in fsdp.full_tensors(self.model, frozen=False):
                own[name].copy_(tensor)
        engine.load_weights(own)
