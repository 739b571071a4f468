"""How large the ``vllm`` engine is made for one command: its context, the sequences it decodes together, its CPU KV cache.

- ``max_model_len``: ``engine.vllm.max_model_len``, or (null) what the command needs (:class:`~tsctl.engines.base.Demand`:
  its longest prompt + ``engine.max_new_tokens``), within the model's ``max_position_embeddings``.
- ``max_num_seqs``: ``engine.batch_size``, capped by the most requests one ``generate`` call of the command sends.
- On the CPU the KV cache holds ``max_num_seqs`` sequences of ``max_model_len`` tokens, rounded up to vLLM's
  blocks (vLLM's CPU build would otherwise reserve ``gpu_memory_utilization`` of the machine's whole memory for
  every engine). When that cache and vLLM's copy of the weights (with its LoRA adapters' slots) do not fit in :data:`HEADROOM` of the memory free
  now, :func:`size` refuses in one line that names the ``engine.*`` values that would fit, before vLLM starts (and
  before any run folder is made). On CUDA ``engine.vllm.gpu_memory_utilization`` sizes the cache and vLLM checks it.

Nothing here imports vLLM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from tsctl.config.errors import ConfigError
from tsctl.config.schema import EngineConfig
from tsctl.engines.base import Demand
from tsctl.engines import vllm_platform

CPU_BLOCK = 128
"""Tokens per KV-cache block of vLLM's CPU build (its default for every attention but MLA)."""
HEADROOM = 0.9
"""Most of the memory free when the engine starts that its KV cache and weights may take."""
GIB = 1 << 30


@dataclass(frozen=True)
class Sizing:
    """What the engine is started with.

    Attributes:
        max_model_len: tokens of prompt + prefix + response per request.
        max_num_seqs: sequences decoded together.
        kv_cache_bytes: the CPU KV cache; None on CUDA (``gpu_memory_utilization`` sizes it there).
    """

    max_model_len: int
    max_num_seqs: int
    kv_cache_bytes: int | None


def token_bytes(config: Any, dtype_name: str) -> int:
    """Bytes of keys and values one token takes in every layer of a model of ``config`` (a transformers config)."""
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return 2 * config.num_hidden_layers * kv_heads * vllm_platform.head_dim(config) * getattr(torch, dtype_name).itemsize


def cpu_kv_cache_bytes(config: Any, dtype_name: str, max_model_len: int, max_num_seqs: int) -> int | None:
    """The KV cache of ``max_num_seqs`` sequences of ``max_model_len`` tokens (rounded up to :data:`CPU_BLOCK`) for a
    model of ``config`` in ``dtype_name`` on the CPU; None on CUDA."""
    if vllm_platform.on_cuda():
        return None
    return token_bytes(config, dtype_name) * math.ceil(max_model_len / CPU_BLOCK) * CPU_BLOCK * max_num_seqs


def size(
    cfg: EngineConfig, max_model_len: int | None, model: torch.nn.Module, dtype_name: str, demand: Demand, free_bytes: int | None,
    adapter_bytes: int = 0,
) -> Sizing:
    """The engine's size for ``model`` (its ``config`` and parameters) computing in ``dtype_name``, serving ``demand``;
    ``max_model_len`` is ``engine.vllm.max_model_len``, ``free_bytes`` the memory free now (None: unchecked, as on CUDA),
    ``adapter_bytes`` what vLLM reserves for LoRA adapters (counted with the weights).

    Raises:
        ConfigError: ``engine.vllm.max_model_len`` beyond the model's context, or a KV cache that does not fit.
    """
    limit = model.config.max_position_embeddings
    if max_model_len is not None and max_model_len > limit:
        raise ConfigError("engine.vllm.max_model_len", f"{max_model_len} is longer than this model's context of {limit} tokens "
                          f"(max_position_embeddings); use at most {limit}, or null for what the command needs")
    length = max_model_len or min(limit, demand.context or limit)
    seqs = min(cfg.batch_size, demand.requests or cfg.batch_size)
    kv = cpu_kv_cache_bytes(model.config, dtype_name, length, seqs)
    if kv is not None and free_bytes is not None:
        weights = sum(p.numel() for p in model.parameters()) * getattr(torch, dtype_name).itemsize + adapter_bytes
        _check_fits(cfg, max_model_len, model.config, dtype_name, (length, seqs, kv, weights), free_bytes)
    return Sizing(length, seqs, kv)


def _check_fits(cfg: EngineConfig, max_model_len: int | None, config: Any, dtype_name: str, sizes: tuple[int, int, int, int], free: int) -> None:
    """Refuse a KV cache of ``kv`` bytes and ``weights`` bytes (``sizes``: ``length``, ``seqs``, ``kv``, ``weights``) beyond
    :data:`HEADROOM` of ``free``, naming the values that fit."""
    length, seqs, kv, weights = sizes
    need, room = kv + weights, HEADROOM * free - weights
    if need <= HEADROOM * free:
        return
    fit_seqs = int(room // (kv // seqs)) if room > 0 else 0
    fit_length = int(room // token_bytes(config, dtype_name)) // CPU_BLOCK * CPU_BLOCK if room > 0 else 0
    capped = f", capped at the {seqs} requests this command sends at once" if seqs < cfg.batch_size else ""
    length_key = f"engine.vllm.max_model_len={max_model_len}" if max_model_len else f"engine.vllm.max_model_len=null: {length}, the longest prompt + engine.max_new_tokens"
    if fit_seqs >= 1:
        fix = f"engine.batch_size={fit_seqs} fits (or a shorter engine.vllm.max_model_len, or a lower engine.max_new_tokens)"
    elif fit_length > cfg.max_new_tokens:
        fix = f"engine.batch_size=1 with engine.vllm.max_model_len={fit_length} fits, if the prompts and engine.max_new_tokens do"
    else:
        fix = "free memory, or use engine=hf (it keeps no second copy of the weights)"
    raise ConfigError(
        "engine.batch_size",
        f"vLLM's KV cache for {seqs} sequences (engine.batch_size={cfg.batch_size}{capped}) of {length} tokens ({length_key}) "
        f"and its {weights / GIB:.1f} GiB of weights need {need / GIB:.1f} GiB, more than {HEADROOM:.0%} of the {free / GIB:.1f} GiB "
        f"of memory free now; {fix}",
    )
