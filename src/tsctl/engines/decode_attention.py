"""The ``hf`` engine's attention on CPU: a plain matmul-softmax-matmul for one-token decode queries.

Registered with transformers' ``AttentionInterface`` as :data:`DECODE_ATTENTION` when this module is
imported; the engine switches a model to it for the duration of a CPU ``generate`` call.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

DECODE_ATTENTION = "tsctl_decode"
"""Name under which :func:`decode_attention` is registered with transformers' ``AttentionInterface``."""


def decode_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention in the engine: matmul-softmax-matmul for one-token queries, SDPA for longer ones.

    Args:
        query: [B, H, Q, D]; key, value: [B, Hkv, K, D] with Hkv dividing H (grouped-query heads
            share the key/value head ``h // (H // Hkv)``, as ``repeat_kv`` lays them out).
        attention_mask: additive [B, 1, Q, K] (or None).

    Returns:
        attention output [B, Q, H, D] and no weights (the ``AttentionInterface`` contract).
    """
    if query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)  # [B, Hkv, G, D]
    scores = torch.matmul(grouped, key.transpose(-1, -2)) * (dim**-0.5 if scaling is None else scaling)  # [B, Hkv, G, K]
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, 0, :].unsqueeze(2)  # [B, 1, 1, K]
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(value.dtype)
    return torch.matmul(weights, value).reshape(batch, 1, heads, dim), None


AttentionInterface.register(DECODE_ATTENTION, decode_attention)
