"""Position- and source-resolved token statistics, and the accumulator that turns sums into means.

Every function here returns ``(sum, count)`` pairs of 0-d tensors (no device sync), so statistics
from several micro-batches, mini-batches or steps are combined by adding sums and counts, never by
averaging averages. :class:`MetricSums` does that adding and divides once, when logging.

Layout. ``values``, ``mask`` and ``source`` are ``[B, T]``. A token's position is its 0-based index
among the response tokens of its row, counted over ``response_mask`` (default: ``mask``), so the
functions work with left or right padding and with a loss mask that drops some response tokens
(pass the full response mask as ``response_mask`` then).

Sources (``source`` values): 0 = plain (an unseeded sample), 1 = prefix (a behaviour-policy token
of a seeded sample), 2 = suffix (the current policy's continuation after a prefix).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import torch
from torch import Tensor

from tsctl.distributed.world import all_gather_objects, all_reduce, current

SOURCE_NAMES: tuple[str, ...] = ("plain", "prefix", "suffix")
"""Name of each ``source`` code, indexed by the code."""

RELATIVE_LABELS: tuple[str, ...] = tuple(f"{10 * k:02d}-{10 * (k + 1):02d}" for k in range(9)) + ("90-100",)
"""Labels of the ten relative-position bins: ``00-10`` ... ``90-100`` (percent of the response)."""

Pair = tuple[Tensor, Tensor]
Number = Union[float, int, Tensor]


def positions_and_lengths(response_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Position of every token within its response, and each response's length.

    Args:
        response_mask: ``[B, T]`` True on response tokens.

    Returns:
        ``positions``: ``[B, T]`` int64, 0 for the first response token (meaningful only where
        ``response_mask``); ``lengths``: ``[B]`` int64 response lengths.
    """
    m = response_mask.long()
    return m.cumsum(dim=-1) - 1, m.sum(dim=-1)


def absolute_labels(edges: Sequence[int]) -> list[str]:
    """Labels of the absolute-position bins with left edges ``edges``: ``[0, 4, 64]`` -> ``0-3, 4-63, 64+``."""
    inner = [f"{lo}-{hi - 1}" for lo, hi in zip(edges[:-1], edges[1:])]
    return inner + [f"{edges[-1]}+"]


def _binned(values: Tensor, mask: Tensor, bins: Tensor, labels: Sequence[str], source: Optional[Tensor]) -> dict[str, Pair]:
    """Sum and count of masked ``values`` per bin id in ``bins`` (and per source when given)."""
    keep = mask.bool()
    ids = bins
    names = list(labels)
    if source is not None:
        ids = source.long() * len(labels) + bins
        names = [f"{src}/{label}" for src in SOURCE_NAMES for label in labels]
    n = len(names)
    ids = ids[keep]
    sums = torch.zeros(n, dtype=torch.float64, device=values.device).index_add(0, ids, values[keep].double())
    counts = torch.bincount(ids, minlength=n)
    return {name: (sums[k], counts[k]) for k, name in enumerate(names)}


def absolute_bins(
    values: Tensor,
    mask: Tensor,
    edges: Sequence[int],
    source: Optional[Tensor] = None,
    response_mask: Optional[Tensor] = None,
) -> dict[str, Pair]:
    """Sum and count of ``values`` per absolute response position bin.

    Args:
        values: ``[B, T]`` per-token values.
        mask: ``[B, T]`` tokens to include.
        edges: strictly increasing left edges starting at 0 (``trainer.position_bins``); the last
            bin is open: ``[0, 4, 8]`` gives ``0-3``, ``4-7``, ``8+``.
        source: ``[B, T]`` int source codes; when given, keys are ``"<source>/<bin>"`` for every
            source and bin (see ``SOURCE_NAMES``).
        response_mask: ``[B, T]`` response tokens positions are counted over; default ``mask``.

    Returns:
        ``{label: (sum, count)}`` with 0-d float64 sums and int64 counts, one entry per bin
        (and source), empty bins included.
    """
    if not edges or edges[0] != 0 or any(b <= a for a, b in zip(edges[:-1], edges[1:])):
        raise ValueError(f"position bin edges must start at 0 and strictly increase; got {list(edges)}")
    positions, _ = positions_and_lengths(mask if response_mask is None else response_mask)
    edge_t = torch.tensor(list(edges), device=values.device)
    bins = torch.bucketize(positions.clamp(min=0), edge_t, right=True) - 1
    return _binned(values, mask, bins, absolute_labels(edges), source)


def relative_deciles(
    values: Tensor,
    mask: Tensor,
    source: Optional[Tensor] = None,
    response_mask: Optional[Tensor] = None,
) -> dict[str, Pair]:
    """Sum and count of ``values`` per tenth of the response: bin ``floor(10 * position / length)``.

    Args: as :func:`absolute_bins` (without ``edges``). Labels are ``RELATIVE_LABELS``.

    Returns:
        ``{label: (sum, count)}``, ten entries (per source when ``source`` is given).
    """
    positions, lengths = positions_and_lengths(mask if response_mask is None else response_mask)
    bins = (10 * positions.clamp(min=0)) // lengths.clamp(min=1).unsqueeze(-1)
    return _binned(values, mask, bins, RELATIVE_LABELS, source)


def split_by_source(values: Tensor, mask: Tensor, source: Tensor) -> dict[str, Pair]:
    """Sum and count of ``values`` per token source.

    Args:
        values: ``[B, T]`` per-token values.
        mask: ``[B, T]`` tokens to include.
        source: ``[B, T]`` int source codes (0 plain, 1 prefix, 2 suffix).

    Returns:
        ``{"plain": (sum, count), "prefix": ..., "suffix": ...}``.
    """
    return _binned(values, mask, source.long(), SOURCE_NAMES, None)


class MetricSums:
    """Adds ``(sum, count)`` pairs (and extrema) under metric names; divides once in :meth:`means`.

    Sums may be tensors on any device; nothing is synchronised until :meth:`means`.
    """

    def __init__(self) -> None:
        self._sums: dict[str, Number] = {}
        self._counts: dict[str, Number] = {}
        self._mins: dict[str, Tensor] = {}
        self._maxs: dict[str, Tensor] = {}

    def add(self, name: str, total: Number, count: Number) -> None:
        """Add ``total`` over ``count`` items to metric ``name``."""
        self._sums[name] = self._sums.get(name, 0.0) + total
        self._counts[name] = self._counts.get(name, 0) + count

    def add_pairs(self, prefix: str, pairs: Mapping[str, tuple[Number, Number]]) -> None:
        """Add every ``{label: (sum, count)}`` entry as metric ``f"{prefix}/{label}"``."""
        for label, (total, count) in pairs.items():
            self.add(f"{prefix}/{label}", total, count)

    def add_tokens(self, name: str, values: Tensor, mask: Tensor) -> None:
        """Add the masked sum and count of ``values`` ``[B, T]``, and track their min and max."""
        keep = mask.bool()
        picked = values.detach()[keep].double()
        self.add(name, picked.sum(), keep.sum())
        if picked.numel():
            lo, hi = picked.min(), picked.max()
            self._mins[name] = torch.minimum(self._mins[name], lo) if name in self._mins else lo
            self._maxs[name] = torch.maximum(self._maxs[name], hi) if name in self._maxs else hi

    def merge(self, other: "MetricSums") -> None:
        """Add every sum, count and extremum of ``other`` (e.g. a mini-batch's, once it is kept)."""
        for name, total in other._sums.items():
            self.add(name, total, other._counts[name])
        for name, lo in other._mins.items():
            hi = other._maxs[name]
            self._mins[name] = torch.minimum(self._mins[name], lo) if name in self._mins else lo
            self._maxs[name] = torch.maximum(self._maxs[name], hi) if name in self._maxs else hi

    def all_reduce(self) -> "MetricSums":
        """These sums, counts and extrema over every rank of a ``torchrun`` job (``self`` in one process).

        Every rank must call it. A metric some rank lacks counts as zero there (no extremum).
        """
        if not current().distributed:
            return self
        names = sorted(set().union(*all_gather_objects(sorted(self._sums))))
        extrema = sorted(set().union(*all_gather_objects(sorted(self._mins))))
        sums = all_reduce(torch.tensor([float(self._sums.get(n, 0.0)) for n in names], dtype=torch.float64))
        counts = all_reduce(torch.tensor([float(self._counts.get(n, 0)) for n in names], dtype=torch.float64))
        inf = float("inf")
        lows = all_reduce(torch.tensor([float(self._mins[n]) if n in self._mins else inf for n in extrema], dtype=torch.float64), "min")
        highs = all_reduce(torch.tensor([float(self._maxs[n]) if n in self._maxs else -inf for n in extrema], dtype=torch.float64), "max")
        out = MetricSums()
        out._sums, out._counts = dict(zip(names, sums)), dict(zip(names, counts))
        out._mins, out._maxs = dict(zip(extrema, lows)), dict(zip(extrema, highs))
        return out

    def means(self) -> dict[str, float]:
        """``{name: sum / count}`` for every metric with a non-zero count, plus ``name/min`` and
        ``name/max`` for metrics added with :meth:`add_tokens`. Metrics with a zero count are left out.
        """
        out: dict[str, float] = {}
        for name, total in self._sums.items():
            count = float(self._counts[name])
            if count > 0:
                out[name] = float(total) / count
        for name, value in self._mins.items():
            out[f"{name}/min"] = float(value)
            out[f"{name}/max"] = float(self._maxs[name])
        return out
