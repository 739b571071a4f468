"""FSDP2 (``torch.distributed.fsdp.fully_shard``) over a Hugging Face causal LM, with gradients that SUM over ranks.

Layout (:func:`shard`): every decoder layer (the classes the model lists in ``_no_split_modules``) is one
FSDP unit, and an :class:`FSDPRoot` around the model holds the rest (embeddings, the tied LM head, the
final norm). Parameters, gradients and the optimiser state live as ``Shard(0)`` DTensors, 1/W per rank;
the root's forward runs any function of the model, so the trainer's own forwards (decoder, then the
LM head in chunks) enter FSDP through its root.

Gradients: every rank's loss is already divided by the GLOBAL mini-batch's token count, so the
update's gradient is the SUM of the ranks' gradients; the reduce-scatter sums
(``set_gradient_divide_factor(1.0)`` with sum-only collectives) instead of averaging.

Micro-batches (:func:`accumulating`): inside a mini-batch no rank reduces or re-shards (no
communication at all after a unit's first all-gather), so the ranks may run different numbers of
micro-batches, and forwards of different shapes (prompt sharing). The mini-batch ends with one
forward and backward of the same one-row input on every rank, whose loss is multiplied by 0
(:func:`reduce_gradients`): that backward reduce-scatters what every rank accumulated, adding exact
zeros, in the same order on every rank.

LoRA (``model.lora``): the adapter is injected before sharding, so a decoder layer's unit holds its frozen
base weights and its trainable ``lora_A``/``lora_B`` together; FSDP2 shards both and reduce-scatters only
the gradients that exist (the adapter's), and the optimiser holds the adapter's shards alone.

Precision: with ``param_dtype`` (bf16 compute on GPU) units all-gather and compute in it while the
fp32 shards stay the master weights and gradients reduce in fp32 (``MixedPrecisionPolicy``).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

from tsctl.distributed.world import World


class FSDPRoot(torch.nn.Module):
    """The FSDP root over ``model``: ``root(fn, *args)`` is ``fn(model, *args)`` run as the root's forward."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        out = fn(self.model, *args, **kwargs)
        # FSDP hooks its backward on the root's outputs; a view among them would lose the hook to any
        # in-place op on it, so views (the log-prob path returns slices) are handed back as copies.
        if isinstance(out, tuple):
            return tuple(t.clone() if isinstance(t, torch.Tensor) and t._base is not None else t for t in out)
        return out.clone() if isinstance(out, torch.Tensor) and out._base is not None else out


def shard(model: torch.nn.Module, world: World, device_type: str, param_dtype: torch.dtype | None = None) -> FSDPRoot:
    """Shard ``model`` in place over the ``world.size`` ranks (see the module docstring); the root to forward through."""
    mesh = init_device_mesh(device_type, (world.size,))
    mixed = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32 if param_dtype else None)
    layer_types = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if type(module).__name__ in layer_types:
            fully_shard(module, mesh=mesh, reshard_after_forward=False, mp_policy=mixed)
    root_policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=mixed.reduce_dtype, cast_forward_inputs=False)
    root = fully_shard(FSDPRoot(model), mesh=mesh, mp_policy=root_policy)
    for module in root.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return root


@contextlib.contextmanager
def accumulating(root: FSDPRoot) -> Iterator[None]:
    """Micro-batches of one mini-batch: gradients accumulate unreduced and parameters stay gathered."""
    assert isinstance(root, FSDPModule)
    root.set_requires_gradient_sync(False)
    root.set_reshard_after_backward(False)
    try:
        yield
    finally:
        root.set_requires_gradient_sync(True)
        root.set_reshard_after_backward(True)


def reduce_gradients(root: FSDPRoot, probe: Callable[[torch.nn.Module], torch.Tensor]) -> None:
    """Sum the gradients every rank accumulated (and re-shard): a backward of ``0 * probe(model)`` on every rank.

    ``probe`` must run the same forward on every rank (same input, same path through the model).
    """
    (root(probe) * 0.0).backward()


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a DTensor (a collective: every rank must call it), a plain tensor as it is."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a DTensor, a plain tensor as it is."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def full_tensors(model: torch.nn.Module, frozen: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """``model``'s state dict as ``(name, whole tensor)`` pairs, each parameter once (a tied one under its first
    name), gathered one at a time (a collective: every rank iterates to the end, in the same order).

    ``frozen=False`` leaves out the parameters that do not require grad (a LoRA policy's base weights, which no
    update changes): a LoRA policy's gather is its adapter's ``lora_A`` [r, in] and ``lora_B`` [out, r] alone.
    """
    seen: set[int] = set()
    for name, value in model.state_dict(keep_vars=True).items():
        if id(value) in seen or (not frozen and isinstance(value, torch.nn.Parameter) and not value.requires_grad):
            continue
        seen.add(id(value))
        yield name, full_tensor(value.detach())

