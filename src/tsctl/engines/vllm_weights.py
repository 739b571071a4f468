"""Hand the trainer's weights to vLLM's workers: cast, in checkpoint format, never through the host.

The trainer's ``state_dict`` (Hugging Face parameter names) becomes (name, tensor) pairs
(:func:`engine_weights`): every tensor is cast to the engine's dtype (bf16 on CUDA by default,
whatever the trainer keeps as master weights), a tensor tied to one already sent (Qwen's
``lm_head`` shares the embedding) is sent once, and names lose the prefixes that wrappers add
(``torch.compile``'s ``_orig_mod.``, activation checkpointing's ``_checkpoint_wrapped_module.``),
so they are the names of the model folder.

A worker never calls its model's ``load_weights`` on a loaded model: after loading, vLLM processes
the weights into kernel form (its CPU backend repacks every linear layer for its GEMM and drops the
original parameter, so a second ``load_weights`` fails). The worker's ``reload_weights`` (vLLM's
``model_loader/reload``, on every backend) maps checkpoint names onto its fused layers layer by
layer, redoes the processing and copies the result into the kernel tensors in place. A layer tied to
another (the LM head to the embedding) is processed from the embedding only, so its own kernel form
is rebuilt afterwards (:meth:`WeightLoaderExtension.refresh_tied`). The pairs reach the workers in one
of two ways:

- **in process** (``tensor_parallel_size == 1``, the engine core and its single worker live in the
  trainer's process): one generator of all pairs, cast one tensor at a time, is passed by reference
  to :meth:`WeightLoaderExtension.tsctl_load_weights`, which reloads them in one pass;
- **CUDA IPC** (``tensor_parallel_size > 1``, workers are other processes): pairs are grouped into
  buckets of at most ``bucket_bytes`` that never split a decoder layer (:func:`buckets`: one reload
  processes a layer only once all its weights arrived), and each bucket is flattened
  into one GPU buffer (:func:`flatten_bucket`), and only a CUDA IPC handle to it
  (``torch.multiprocessing.reductions.reduce_tensor``, pickled to bytes with the GPU's UUID) and the
  tensors' names, shapes and offsets travel through ``collective_rpc``. Every worker maps the
  trainer's buffer (:func:`open_ipc`), loads views of it and synchronises before the call returns,
  so the trainer may free the buffer as soon as the call is done. The buffer lives on the
  trainer's GPU; a worker on another GPU reads it peer to peer.

The worker side is :class:`WeightLoaderExtension`, mixed into every vLLM worker through
``LLM(worker_extension_cls=...)``. Only floating-point tensors are accepted. The in-process path is
tested against vLLM's CPU build; the CUDA IPC path only against a stand-in (it needs several GPUs).
"""

from __future__ import annotations

import inspect
import itertools
import pickle
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch

BUCKET_BYTES = 512 << 20
"""Default most bytes (in the engine's dtype) per bucket: the extra GPU memory a sync needs."""

LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")
"""The decoder layer a folder name belongs to (``model.layers.3.mlp.up_proj.weight`` -> ``model.layers.3``)."""
WRAPPER_SEGMENTS = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")
"""Name segments added by ``torch.compile``, activation checkpointing and FSDP wrappers."""


@dataclass(frozen=True)
class TensorSpec:
    """Where one tensor lies in a flattened bucket: elements ``[offset, offset + numel)`` viewed as ``shape``."""

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def numel(self) -> int:
        return int(torch.Size(self.shape).numel())


def checkpoint_name(name: str) -> str:
    """``name`` without wrapper segments: the parameter's name in the model folder."""
    for segment in WRAPPER_SEGMENTS:
        name = name.replace(segment, "")
    return name


def engine_weights(state_dict: dict[str, torch.Tensor], dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """(folder name, tensor cast to ``dtype``) pairs, each storage once, cast one tensor at a time.

    Raises:
        TypeError: a tensor is not floating point (it cannot be cast to the engine's dtype).
    """
    seen: set[tuple[int, int]] = set()
    for name, tensor in state_dict.items():
        if not tensor.is_floating_point():
            raise TypeError(f"weight {name} has dtype {tensor.dtype}; only floating-point weights can be synced to vLLM")
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key in seen:  # tied to a tensor already sent (lm_head = embed_tokens)
            continue
        seen.add(key)
        yield checkpoint_name(name), tensor.detach().to(dtype)


def layer_of(name: str) -> str:
    """The decoder layer of a folder name, or the name itself outside the layers (embedding, final norm, head)."""
    match = LAYER.match(name)
    return match.group(1) if match else name


def buckets(weights: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int = BUCKET_BYTES) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive groups of ``weights`` of at most ``bucket_bytes`` each, made of whole layers (:func:`layer_of`;
    a layer larger than ``bucket_bytes`` goes alone)."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for _, group in itertools.groupby(weights, key=lambda pair: layer_of(pair[0])):
        layer = list(group)
        nbytes = sum(tensor.numel() * tensor.element_size() for _, tensor in layer)
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.extend(layer)
        size += nbytes
    if bucket:
        yield bucket


def flatten_bucket(bucket: list[tuple[str, torch.Tensor]]) -> tuple[torch.Tensor, list[TensorSpec]]:
    """One flat tensor [N] holding the bucket's tensors (one dtype, one device) back to back, and their specs."""
    specs, offset = [], 0
    for name, tensor in bucket:
        specs.append(TensorSpec(name, tuple(tensor.shape), offset))
        offset += tensor.numel()
    return torch.cat([tensor.reshape(-1) for _, tensor in bucket]), specs


def unflatten_bucket(flat: torch.Tensor, specs: Iterable[TensorSpec]) -> list[tuple[str, torch.Tensor]]:
    """Views of ``flat`` [N] as the tensors ``specs`` describe (no copy)."""
    return [(s.name, flat[s.offset : s.offset + s.numel].view(s.shape)) for s in specs]


def share_ipc(flat: torch.Tensor) -> bytes:
    """A CUDA IPC handle to ``flat`` (a CUDA tensor) with its GPU's UUID, pickled: a few hundred bytes."""
    from torch.multiprocessing.reductions import reduce_tensor

    if flat.device.type != "cuda":
        raise ValueError("weight sync with tensor_parallel_size > 1 needs the trainer's weights on a CUDA device (model.device=cuda)")
    _, args = reduce_tensor(flat)
    return pickle.dumps((str(torch.cuda.get_device_properties(flat.device).uuid), args))


def open_ipc(handle: bytes) -> torch.Tensor:
    """The tensor a :func:`share_ipc` handle points at, mapped into this process (no copy).

    The handle names the GPU by UUID; this process may number its GPUs differently, so the
    device index is looked up here.
    """
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    uuid, args = pickle.loads(handle)  # noqa: S301 - bytes written by share_ipc in the trainer process
    names = list(inspect.signature(rebuild_cuda_tensor).parameters)
    kwargs = dict(zip(names, args))
    kwargs["storage_device"] = _device_index(uuid)
    return rebuild_cuda_tensor(**kwargs)


def _device_index(uuid: str) -> int:
    """This process's index of the GPU whose UUID is ``uuid``."""
    for index in range(torch.cuda.device_count()):
        if str(torch.cuda.get_device_properties(index).uuid) == uuid:
            return index
    raise RuntimeError(f"the trainer's GPU {uuid} is not visible to this vLLM worker; keep both on the same CUDA_VISIBLE_DEVICES")


class WeightLoaderExtension:
    """Mixed into every vLLM worker (``LLM(worker_extension_cls=...)``) to receive the trainer's weights.

    ``self.reload_weights`` is the worker's own (it takes (folder name, tensor) pairs in checkpoint
    format, shards and fuses them, and redoes vLLM's post-load processing in place);
    ``self.model_runner.model`` is the worker's model.
    """

    model_runner: Any
    reload_weights: Any

    def tsctl_load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Reload tensors handed over by reference (the worker runs in the trainer's process)."""
        self._reload(weights)

    def tsctl_load_ipc(self, handle: bytes, specs: list[TensorSpec]) -> None:
        """Reload a bucket flattened by :func:`flatten_bucket` and shared by :func:`share_ipc`; returns once it is copied."""
        flat = open_ipc(handle)
        self._reload(unflatten_bucket(flat, specs))
        if flat.is_cuda:
            torch.cuda.current_stream().synchronize()
        del flat

    def _reload(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
        self.refresh_tied()

    def refresh_tied(self) -> None:
        """Rebuild the kernel form of every unquantized embedding or head whose weight is another layer's.

        vLLM's reload processes a tied parameter from its first layer only (the embedding); the LM head
        sharing it keeps what vLLM derived from the old weight (on the CPU: a packed copy for its GEMM).
        Its processing derives from the weight alone, so running it again is exact.
        """
        owners: set[int] = set()
        for module in self.model_runner.model.modules():
            weight = getattr(module, "_parameters", {}).get("weight")
            if weight is None:
                continue
            if id(weight) in owners and _unquantized_embedding(module):
                module.quant_method.process_weights_after_loading(module)
            owners.add(id(weight))


def _unquantized_embedding(module: torch.nn.Module) -> bool:
    """Whether ``module`` is an embedding or LM head with vLLM's unquantized method (whose processing is repeatable)."""
    method = getattr(module, "quant_method", None)
    if method is None:
        return False
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    return isinstance(method, UnquantizedEmbeddingMethod)
