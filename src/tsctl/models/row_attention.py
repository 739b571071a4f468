"""Attention of a packed sequence row by row: the linear layers see only real tokens, attention the padded rows.

A packed forward (:mod:`tsctl.models.packing`) runs every real token once through the linear layers
as one sequence ``[1, N]``. A dense mask over that sequence would make attention quadratic in ``N``;
here each layer's attention instead gathers, per *attention row*, its queries and keys out of the
sequence, pads them into ``[A, Q, K]`` blocks (rows of similar length together, :data:`BLOCKS`), runs the model's own attention (``sdpa`` or ``eager``)
on them with a 4D mask, and puts each token's output back in its place. An attention row is a
response row's continuation (queries) over its context and itself (keys), or a context over itself,
so attention costs what the padded batch's does while the linear layers cost the real tokens only.

:func:`row_attention` is registered with transformers' ``AttentionInterface`` as :data:`ROW_ATTENTION`
when this module is imported; :func:`tsctl.models.packing.packed_hidden` switches the model to it for
one forward and hands it the rows (:class:`AttentionRows`) as a keyword argument. Activation
checkpointing would recompute the layers in backward after the switch is undone, so the packed
forward then uses a block-diagonal mask instead.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from tsctl.models.padding import additive_mask

ROW_ATTENTION = "tsctl_rows"
"""Name under which :func:`row_attention` is registered with transformers' ``AttentionInterface``."""


BLOCKS = 4
"""Attention rows are sorted by their number of keys and run in this many blocks, each padded to its own
longest row: less padding than one block (on the built-in model on CPU, 2, 4 and 8 ran 5% faster than 1)."""


@dataclass
class AttentionBlock:
    """A attention rows padded to Q queries and K keys.

    Attributes:
        queries: [A, Q] index into the packed sequence of each row's queries (padding: index 0).
        keys: [A, K] index into the packed sequence of each row's keys (padding: index 0).
        allowed: [A, Q, K] bool, which key each query sees (a padding query sees key 0 only).
    """

    queries: torch.Tensor
    keys: torch.Tensor
    allowed: torch.Tensor


@dataclass
class AttentionRows:
    """Which tokens of a packed sequence of N tokens attend to which, as blocks of padded attention rows.

    Attributes:
        blocks: the :class:`AttentionBlock` s.
        slots: [N] index of each token's query slot in the blocks' slots laid end to end (block by
            block, each ``[A, Q]`` row-major).
        inner: the model's own attention implementation (``sdpa`` or ``eager``).
    """

    blocks: list[AttentionBlock]
    slots: torch.Tensor
    inner: str

    @classmethod
    def build(cls, rows: list[tuple[list[int], list[int], int]], tokens: int, inner: str, device: torch.device) -> "AttentionRows":
        """From ``rows`` of (query indices, key indices, keys before the queries): each query ``i`` sees the
        keys ``< before + i + 1`` (the keys before the queries, then the queries causally), of ``tokens`` in all."""
        order = sorted(range(len(rows)), key=lambda a: len(rows[a][1]))
        size = -(-len(rows) // BLOCKS)
        blocks, slots, offset = [], torch.zeros(tokens, dtype=torch.long), 0
        for start in range(0, len(order), size):
            chunk = [rows[a] for a in order[start : start + size]]
            width_q, width_k = max(len(q) for q, _, _ in chunk), max(len(k) for _, k, _ in chunk)
            queries = torch.zeros(len(chunk), width_q, dtype=torch.long)
            keys = torch.zeros(len(chunk), width_k, dtype=torch.long)
            visible = torch.zeros(len(chunk), width_q, dtype=torch.long)  # keys each query sees (a prefix of its row's)
            for a, (q, k, before) in enumerate(chunk):
                queries[a, : len(q)] = torch.tensor(q, dtype=torch.long)
                keys[a, : len(k)] = torch.tensor(k, dtype=torch.long)
                visible[a, : len(q)] = torch.arange(before + 1, before + 1 + len(q))
                slots[queries[a, : len(q)]] = offset + a * width_q + torch.arange(len(q))
            allowed = torch.arange(width_k)[None, None, :] < visible[:, :, None].clamp_min(1)  # a padding query sees key 0
            blocks.append(AttentionBlock(queries.to(device), keys.to(device), allowed.to(device)))
            offset += queries.numel()
        return cls(blocks, slots.to(device), inner)


def row_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    *,
    attention_rows: AttentionRows,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """The model's own attention over the padded attention rows of one packed sequence.

    Args:
        query: [1, H, N, D]; key, value: [1, Hkv, N, D].
        attention_mask: unused (None: transformers builds none for this implementation).
        attention_rows: the rows (:class:`AttentionRows`).

    Returns:
        attention output [1, N, H, D] and no weights (the ``AttentionInterface`` contract).
    """
    attend = _inner(attention_rows.inner, module)
    outputs = []
    for block in attention_rows.blocks:
        q = query[0][:, block.queries].transpose(0, 1)  # [A, H, Q, D]
        k = key[0][:, block.keys].transpose(0, 1)  # [A, Hkv, K, D]
        v = value[0][:, block.keys].transpose(0, 1)
        mask = additive_mask(block.allowed[:, None], q.dtype)  # [A, 1, Q, K]
        out, _ = attend(module, q, k, v, mask, dropout=dropout, scaling=scaling, **kwargs)  # [A, Q, H, D]
        outputs.append(out.reshape(-1, *out.shape[2:]))
    return torch.cat(outputs)[attention_rows.slots].unsqueeze(0), None


def _inner(name: str, module: torch.nn.Module):
    """The attention function ``name`` of ``module``'s model: a registered one, or its modeling file's eager one."""
    if name in ALL_ATTENTION_FUNCTIONS:
        return ALL_ATTENTION_FUNCTIONS[name]
    return inspect.getmodule(type(module)).eager_attention_forward


AttentionInterface.register(ROW_ATTENTION, row_attention)
