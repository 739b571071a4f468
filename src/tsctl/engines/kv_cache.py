"""The ``hf`` engine's key/value cache: preallocated per-layer buffers that grow by doubling."""

from __future__ import annotations

import torch
from transformers.cache_utils import CacheLayerMixin


class PreallocatedLayer(CacheLayerMixin):
    """Keys and values of one attention layer in buffers of shape [B, H, size, D], filled left to right.

    ``update`` writes the new states after the ones already stored and returns views of the filled
    part. The buffers start at twice the first states' length and double when full (copying the
    filled part), up to ``capacity``: a decode step rarely reallocates, and the whole buffer, zeroed
    beyond the filled part, is never more than twice what is stored, so attention may read it
    whole, contiguous, with the tail masked (:class:`~tsctl.engines.fused_decode.FusedDecoder`).
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    @property
    def size(self) -> int:
        """Positions the current buffers hold (filled or not)."""
        return self.keys.shape[2]

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Allocate the buffers from the first states' batch, heads, length, head size, dtype and device."""
        size = min(self.capacity, 2 * key_states.shape[-2])
        self.keys = self._zeros_like(key_states, key_states.shape[0], size)
        self.values = self._zeros_like(value_states, value_states.shape[0], size)
        self.is_initialized = True

    @staticmethod
    def _zeros_like(states: torch.Tensor, batch: int, size: int) -> torch.Tensor:
        """Zeroed buffer [batch, H, size, D]: the unfilled tail is finite, so a masked read of the whole buffer is exact."""
        return states.new_zeros(batch, states.shape[1], size, states.shape[-1])

    def _resize(self, rows: torch.Tensor | slice, batch: int, size: int) -> None:
        """Move the filled part of rows ``rows`` into new buffers of ``batch`` rows and ``size`` positions."""
        for name in ("keys", "values"):
            old = getattr(self, name)
            new = self._zeros_like(old, batch, size)
            new[:, :, : self.length] = old[rows, :, : self.length]
            setattr(self, name, new)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append states of shape [B, H, Q, D]; return all stored keys and values, [B, H, length, D]."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions; {end} were written")
        if end > self.size:
            self._resize(slice(None), self.keys.shape[0], min(self.capacity, max(2 * self.size, end)))
        start, self.length = self.length, end
        self.keys[:, :, start : self.length] = key_states
        self.values[:, :, start : self.length] = value_states
        return self.keys[:, :, : self.length], self.values[:, :, : self.length]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep the rows ``beam_idx`` [B'] (repeats allowed), copying only the filled positions."""
        self._resize(beam_idx, len(beam_idx), self.size)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.capacity
