"""Split a mini-batch into micro-batches: a row count, or a budget of tokens per forward.

Every micro-batch loss divides by the whole mini-batch's normaliser (:mod:`tsctl.algo.aggregations`), so
how the rows are split changes neither the loss nor the gradient, only the memory a forward needs:
about ``rows x longest row`` tokens of activations when padded, the rows' real tokens when packed
(:mod:`tsctl.models.packing`).
"""

from __future__ import annotations

from typing import Sequence

import torch


def micro_batches(
    rows: torch.Tensor, lengths: Sequence[int], max_rows: int = 0, max_tokens: int = 0, packed: bool = False
) -> list[torch.Tensor]:
    """Micro-batches of the row indices ``rows``.

    Args:
        rows: [M] (long, on the CPU) indices of the mini-batch's rows.
        lengths: tokens (prompt + response) of every row of the batch, indexed by row.
        max_rows: most rows per micro-batch; 0 = no limit.
        max_tokens: most padded tokens (rows x the longest row's length) per micro-batch; 0 = no
            limit. Rows are then taken longest first and packed greedily, so rows of similar length
            share a micro-batch (little padding); a row longer than the budget runs alone.
        packed: the forwards run packed: ``max_tokens`` counts real tokens (the sum of the rows'
            lengths), and rows are taken in the given order.

    Returns:
        index tensors (long, CPU) that together hold every row once; with ``max_tokens=0``, runs of
        ``max_rows`` consecutive rows in the given order.
    """
    if len(rows) == 0:
        return []
    if not max_tokens:
        size = max_rows or len(rows)
        return [rows[start : start + size] for start in range(0, len(rows), size)]
    if packed:
        return _by_real_tokens(rows.tolist(), lengths, max_rows, max_tokens)
    order = sorted(rows.tolist(), key=lambda row: -lengths[row])
    chunks: list[list[int]] = [[]]
    for row in order:
        chunk = chunks[-1]
        longest = lengths[chunk[0]] if chunk else 0  # rows arrive longest first
        full = bool(max_rows) and len(chunk) >= max_rows
        if chunk and (full or (len(chunk) + 1) * max(longest, lengths[row]) > max_tokens):
            chunks.append([row])
        else:
            chunk.append(row)
    return [torch.tensor(chunk, dtype=torch.long) for chunk in chunks]


def _by_real_tokens(rows: list[int], lengths: Sequence[int], max_rows: int, max_tokens: int) -> list[torch.Tensor]:
    """Consecutive runs of ``rows`` of at most ``max_tokens`` real tokens (and ``max_rows`` rows, if set);
    a row longer than the budget runs alone."""
    chunks: list[list[int]] = [[]]
    used = 0
    for row in rows:
        full = bool(max_rows) and len(chunks[-1]) >= max_rows
        if chunks[-1] and (full or used + lengths[row] > max_tokens):
            chunks.append([])
            used = 0
        chunks[-1].append(row)
        used += lengths[row]
    return [torch.tensor(chunk, dtype=torch.long) for chunk in chunks]
