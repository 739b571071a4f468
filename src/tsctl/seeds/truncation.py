"""Truncation strategies: where to cut a behaviour-policy response into a Thinking Seeds prefix.

A strategy looks at the token ids of a full behaviour response ``s`` and returns a cut point
``cut``; the seed prefix is ``s[:cut]`` and the rollout policy writes the rest. Strategies work
on token ids only, never on decoded text, and are pure functions of their inputs (randomness comes
from the ``numpy.random.Generator`` passed in).

Every cut lies in ``[0, span]`` where ``span`` (see :func:`cut_span`) is the number of response
tokens before the first EOS, further capped at ``answer_start`` when ``seeds.exclude_answer`` is
set and the task can tell where the final-answer line starts. All fractions below are fractions
of that span and are rounded half up to a whole token.

Strategies (the top-level ``truncation`` key selects one by name):

- ``fixed``: ``seeds.fraction`` of the span.
- ``uniform``: a fraction drawn from ``U[seeds.lo, seeds.hi]``.
- ``boundary``: as ``uniform``, then moved to the nearest cut just after a reasoning-step boundary
  token (ties go to the earlier cut); the drawn cut is kept when the span has no boundary token.
- ``entropy``: just before the highest-entropy ("forking") token among the first
  ``seeds.entropy_window`` of the span (at least one token); ties go to the earliest token.
- ``schedule``: a fraction shrinking from ``seeds.schedule_start`` at step 0 to
  ``seeds.schedule_end`` at the last step (``seeds.schedule``: ``linear`` or ``cosine``); see
  :func:`schedule_fraction`.
- ``target_pass``: the seed controller (:mod:`tsctl.seeds.controller`) chooses, per prompt, which graded
  behaviour response to cut and at which fraction, so that seeded samples pass about ``seeds.target_pass``
  of the time; until it has measured anything, the ``uniform`` cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import AbstractSet, Callable, Sequence

import numpy as np

from tsctl.config.registry import Registry
from tsctl.config.schema import SeedsConfig


@dataclass(frozen=True)
class CutContext:
    """Everything a strategy may look at besides the response's token ids.

    Attributes:
        eos_id: the tokenizer's end-of-sequence id; the first EOS and everything after it are never
            part of a prefix. None when the tokenizer has none.
        entropies: the behaviour policy's entropy at each response token, shape [len(response)];
            required by ``entropy`` only.
        boundary_ids: token ids that end a reasoning step (e.g. the newline tokens); used by
            ``boundary``.
        answer_start: index of the first token of the final-answer line (see
            :func:`find_answer_start`), or None when the task cannot tell.
        step: current training step, counted from 0; used by ``schedule``.
        total_steps: steps of the whole run (>= 1); the last step, ``total_steps - 1``, gets
            ``seeds.schedule_end``.
    """

    eos_id: int | None
    entropies: Sequence[float] | None = None
    boundary_ids: AbstractSet[int] = frozenset()
    answer_start: int | None = None
    step: int = 0
    total_steps: int = 1

    def __post_init__(self) -> None:
        if self.answer_start is not None and self.answer_start < 0:
            raise ValueError(f"CutContext.answer_start must be >= 0 or None, got {self.answer_start}")
        if self.total_steps < 1:
            raise ValueError(f"CutContext.total_steps must be >= 1, got {self.total_steps}")


Strategy = Callable[[Sequence[int], int, CutContext, SeedsConfig, np.random.Generator], int]
"""``(response_ids, span, ctx, cfg, rng) -> cut`` with ``0 <= cut <= span``."""

CUT_SCHEDULES: tuple[str, ...] = ("cosine", "linear")
"""Shapes of the ``schedule`` strategy's prefix fraction over the run (``seeds.schedule``); not the learning-rate schedule."""

STRATEGIES: Registry[Strategy] = Registry("truncation strategy", __package__, key="truncation", reads=(), largest=None, entropies=False, controller=False)
"""The strategies by name (the values of ``truncation``), from any module of :mod:`tsctl.seeds`. Each declares
``reads`` (the ``seeds.*`` keys it reads; another strategy's keys are refused as idle), ``largest`` (the
largest fraction it cuts at, from ``seeds``: a strategy whose largest is 0 is refused; None: not a
fraction), ``entropies`` (it needs pi_b's per-token entropies, which a trace file lacks) and ``controller``
(the seed controller replaces its cuts once it has measured something: :mod:`tsctl.seeds.controller`)."""


def cut_span(response_ids: Sequence[int], ctx: CutContext, cfg: SeedsConfig) -> int:
    """Largest allowed cut: tokens before the first EOS, capped at the answer line when excluded."""
    span = next((i for i, tok in enumerate(response_ids) if tok == ctx.eos_id), len(response_ids))
    if cfg.exclude_answer and ctx.answer_start is not None:
        span = min(span, ctx.answer_start)
    return span


def choose_cut(
    strategy: str,
    response_ids: Sequence[int],
    ctx: CutContext,
    cfg: SeedsConfig,
    rng: np.random.Generator,
) -> int:
    """Cut point of ``response_ids`` chosen by the named strategy; the prefix is ``response_ids[:cut]``.

    Returns an int in ``[0, cut_span(response_ids, ctx, cfg)]``; the same rng state gives the same cut.
    """
    fn = STRATEGIES.get(strategy)
    span = cut_span(response_ids, ctx, cfg)
    cut = int(fn(response_ids, span, ctx, cfg, rng))
    if not 0 <= cut <= span:
        raise ValueError(f"truncation strategy {strategy!r} returned cut {cut} outside [0, {span}]")
    return cut


def schedule_fraction(cfg: SeedsConfig, step: int, total_steps: int) -> float:
    """Prefix fraction of the ``schedule`` strategy at ``step`` of ``total_steps``.

    Steps count from 0, so the last step is ``total_steps - 1``. With progress
    ``p = clip(step / (total_steps - 1), 0, 1)`` (0 for a one-step run): ``linear`` gives
    ``start + (end - start) * p``; ``cosine`` gives ``end + (start - end) * (1 + cos(pi * p)) / 2``.
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    p = min(max(step / max(total_steps - 1, 1), 0.0), 1.0)
    if cfg.schedule == "linear":
        remaining = 1.0 - p
    elif cfg.schedule == "cosine":
        remaining = 0.5 * (1.0 + math.cos(math.pi * p))
    else:
        raise ValueError(f"unknown seeds.schedule {cfg.schedule!r}; valid names: {', '.join(CUT_SCHEDULES)}")
    return cfg.schedule_end + (cfg.schedule_start - cfg.schedule_end) * remaining


def find_answer_start(
    response_ids: Sequence[int],
    answer_marker_ids: Sequence[int],
    line_start_after: AbstractSet[int] | None = None,
) -> int | None:
    """Index of the first token of the LAST occurrence of the answer marker, or None if absent.

    Args:
        response_ids: token ids of the response.
        answer_marker_ids: token ids of the marker (e.g. ``"Answer:"``) as the tokenizer writes it
            at the start of a line; tokenizers that encode it differently in other contexts need one
            call per variant (take the largest index).
        line_start_after: when given, a match counts only at index 0 or right after one of these
            token ids (e.g. the newline tokens), so a marker quoted mid-line is ignored.
    """
    marker = list(answer_marker_ids)
    if not marker:
        raise ValueError("answer_marker_ids is empty")
    ids = list(response_ids)
    for start in range(len(ids) - len(marker), -1, -1):
        if ids[start : start + len(marker)] != marker:
            continue
        if line_start_after is None or start == 0 or ids[start - 1] in line_start_after:
            return start
    return None


def _at_fraction(fraction: float, span: int) -> int:
    """``fraction`` of ``span`` tokens, rounded half up and clamped to ``[0, span]``."""
    return min(span, max(0, math.floor(fraction * span + 0.5)))


@STRATEGIES.register("fixed", reads=("fraction",), largest=lambda s: s.fraction)
def _fixed(
    ids: Sequence[int], span: int, ctx: CutContext, cfg: SeedsConfig, rng: np.random.Generator
) -> int:
    """``seeds.fraction`` of the span."""
    return _at_fraction(cfg.fraction, span)


@STRATEGIES.register("uniform", reads=("lo", "hi"), largest=lambda s: s.hi)
def _uniform(
    ids: Sequence[int], span: int, ctx: CutContext, cfg: SeedsConfig, rng: np.random.Generator
) -> int:
    """A fraction drawn from ``U[seeds.lo, seeds.hi]``."""
    return _at_fraction(rng.uniform(cfg.lo, cfg.hi), span)


@STRATEGIES.register("boundary", reads=("lo", "hi"), largest=lambda s: s.hi)
def _boundary(
    ids: Sequence[int], span: int, ctx: CutContext, cfg: SeedsConfig, rng: np.random.Generator
) -> int:
    """The ``uniform`` cut moved to the nearest point just after a boundary token (ties: earlier)."""
    target = _uniform(ids, span, ctx, cfg, rng)
    after_boundary = [i + 1 for i in range(span) if ids[i] in ctx.boundary_ids]
    if not after_boundary:
        return target
    return min(after_boundary, key=lambda cut: (abs(cut - target), cut))


@STRATEGIES.register("entropy", reads=("entropy_window",), entropies=True)
def _entropy(
    ids: Sequence[int], span: int, ctx: CutContext, cfg: SeedsConfig, rng: np.random.Generator
) -> int:
    """Just before the highest-entropy token in the first ``seeds.entropy_window`` of the span."""
    if ctx.entropies is None:
        raise ValueError(
            "truncation 'entropy' needs the behaviour policy's per-token entropies (CutContext.entropies)"
        )
    if len(ctx.entropies) != len(ids):
        raise ValueError(
            f"CutContext.entropies has {len(ctx.entropies)} values for a response of {len(ids)} tokens"
        )
    window = min(span, max(1, _at_fraction(cfg.entropy_window, span)))
    if window == 0:
        return 0
    entropies = np.asarray(ctx.entropies[:window], dtype=np.float64)
    if not np.all(np.isfinite(entropies)):
        raise ValueError("CutContext.entropies contains non-finite values")
    return int(np.argmax(entropies))


@STRATEGIES.register("schedule", reads=("schedule", "schedule_start", "schedule_end"), largest=lambda s: max(s.schedule_start, s.schedule_end))
def _schedule(
    ids: Sequence[int], span: int, ctx: CutContext, cfg: SeedsConfig, rng: np.random.Generator
) -> int:
    """:func:`schedule_fraction` at ``ctx.step`` of ``ctx.total_steps``."""
    return _at_fraction(schedule_fraction(cfg, ctx.step, ctx.total_steps), span)


@STRATEGIES.register("target_pass", reads=("lo", "hi", "target_pass", "controller_band", "controller_prior"), largest=lambda s: 1.0, controller=True)
def _target_pass(
    ids: Sequence[int], span: int, ctx: CutContext, cfg: SeedsConfig, rng: np.random.Generator
) -> int:
    """The cut before the seed controller has measured anything: ``uniform``'s."""
    return _uniform(ids, span, ctx, cfg, rng)
