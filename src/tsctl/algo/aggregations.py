"""Aggregations: how per-token values become one number (``algo.aggregation``), with the normalisers of a whole mini-batch.

``algo.aggregation`` names an entry of :data:`AGGREGATIONS`, ``fn(values, mask, norms) -> (total, normaliser)``, the
aggregate being ``total / normaliser``: ``dapo`` is the token-mean (every loss token of the mini-batch weighs the
same), ``grpo`` the sequence-mean of token-means (every sequence weighs the same, its tokens share its weight). The
division is left to the caller (:class:`~tsctl.algo.objective.Objective`), so a term's coefficient multiplies the total
before it. The objective (:mod:`tsctl.algo.objective`) aggregates each of its
per-token terms with the one chosen. A new aggregation is one new module of :mod:`tsctl.algo` registering itself; it
may declare ``settings`` (a dataclass beside it, keys ``algo.<name>.*``), given to it as ``settings=``.

Normalisers. A mini-batch may be split into micro-batches whose losses are summed by gradient accumulation. Each
aggregation therefore divides by a normaliser of the whole *mini-batch*, passed in: ``norms.tokens`` (its number of
loss tokens) and ``norms.sequences`` (its number of sequences with at least one loss token); :func:`loss_norms`
computes both from the mini-batch's mask. With them, the sum of the micro-batch losses equals the unsplit loss
exactly, and so does the gradient.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Union

import torch
from torch import Tensor

from tsctl.config.registry import Registry

Norm = Union[float, Tensor]


class Norms(NamedTuple):
    """Normalisers of a whole mini-batch: ``tokens`` (loss tokens) and ``sequences`` (rows with a loss token), each >= 1."""

    tokens: Norm
    sequences: Norm


Aggregation = Callable[..., tuple[Tensor, Norm]]
"""An entry of :data:`AGGREGATIONS`: ``fn(values [B, T], mask [B, T], norms, **arguments) -> (0-d total, normaliser)``."""

AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation", __package__, key="algo.aggregation", reads=())
"""The aggregations by name (``algo.aggregation``), from any module of :mod:`tsctl.algo`; each may declare ``reads`` and ``settings``."""


def loss_norms(mask: Tensor) -> Norms:
    """Normalisers of a whole mini-batch.

    Args:
        mask: ``[B, T]`` loss mask of the *whole* mini-batch (before any micro-batch split).

    Returns:
        ``tokens``: 0-d float, number of loss tokens; ``sequences``: 0-d float, number of sequences with at least
        one loss token. Each is at least 1, so an empty mini-batch gives a zero loss instead of NaN.
    """
    m = mask.bool()
    tokens = m.sum().clamp(min=1).to(torch.float32)
    sequences = m.any(dim=-1).sum().clamp(min=1).to(torch.float32)
    return Norms(tokens, sequences)


@AGGREGATIONS.register("dapo")
def token_mean(values: Tensor, mask: Tensor, norms: Norms) -> tuple[Tensor, Norm]:
    """DAPO's token-mean: ``sum_{i,t} mask_it * v_it`` over ``norms.tokens`` (``values``, ``mask``: ``[B, T]``; values
    finite at masked-out positions)."""
    return (values * mask.to(values.dtype)).sum(), norms.tokens


@AGGREGATIONS.register("grpo")
def seq_mean_token_mean(values: Tensor, mask: Tensor, norms: Norms) -> tuple[Tensor, Norm]:
    """GRPO's sequence-mean of token-means: ``sum_i (sum_t mask_it * v_it / sum_t mask_it)`` over ``norms.sequences``
    (``values``, ``mask``: ``[B, T]``). A sequence without loss tokens contributes 0 (and is not counted in
    ``norms.sequences``)."""
    m = mask.to(values.dtype)
    per_seq = (values * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)
    return per_seq.sum(), norms.sequences
