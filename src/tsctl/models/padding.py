"""Left padding and additive attention masks, for forwards that pass the model an explicit 4D mask."""

from __future__ import annotations

from typing import Sequence

import torch


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token sequences into a batch.

    Returns:
        input ids [N, L] (long) and a mask [N, L] (bool) that is True on real tokens.
    """
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    real = torch.zeros((len(seqs), width), dtype=torch.bool)
    for row, seq in enumerate(seqs):
        if seq:
            ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            real[row, width - len(seq) :] = True
    return ids.to(device), real.to(device)


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Turn a bool mask (True = may attend) into the additive float mask attention adds to its scores."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, torch.finfo(dtype).min
    )


def prefill_mask(real: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Causal mask over a left-padded batch, [N, 1, L, L]: a query sees earlier real tokens and itself.

    Letting a pad query see itself keeps its softmax finite; no real token ever sees a pad.
    """
    width = real.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=real.device).tril()
    allowed = causal & real[:, None, None, :]
    allowed |= torch.eye(width, dtype=torch.bool, device=real.device)
    return additive_mask(allowed, dtype)
