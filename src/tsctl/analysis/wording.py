"""How a comparison is put into words, in one place: its verdict and what its interval rules out (the phrasings the
report, the results page and the README never use are looked for by ``tests/forbidden_phrasings.py``).

The rules:

- A verdict is ``better`` / ``worse`` (``higher`` / ``lower`` for a metric with no better direction, such
  as entropy) when the comparison's Holm-adjusted p-value is below alpha (:mod:`~tsctl.analysis.families`);
  otherwise ``not distinguishable``, or ``untested (no p-value)`` when there is none (one paired run, or no spread to test).
- A difference that is not distinguishable from 0 is never called "no effect", "no difference" or "neither
  helps nor hurts", nor said to lie "within the spread": an interval that holds 0 also holds effects. The one
  exception is ``equivalent within ±m``, said only when the equivalence test (TOST over seeds,
  :func:`~tsctl.analysis.stats.equivalence_p`) against the stated margin m (``report.equivalence_margin``)
  passes after Holm.
- Every comparison says what its interval rules out, in the metric's units: with interval [L, H] around
  ``point - baseline`` of a metric where higher is better, "rules out gains > H / losses > -L"; where the
  interval excludes 0 it also says which side it rules out whole (:func:`rules_out`).
"""

from __future__ import annotations

import math
from typing import Optional

BETTER, WORSE, SAME = "better", "worse", "not distinguishable"
UNTESTED = "untested (no p-value)"
"""The verdict of a comparison with no p-value: fewer than two paired runs, or no spread to test."""
HIGHER, LOWER = "higher", "lower"

_WORDS = {True: (("gains", "gain"), ("losses", "loss")), False: (("losses", "loss"), ("gains", "gain")),
          None: (("rises", "rise"), ("falls", "fall"))}
"""Words for a rise and for a fall of a metric (plural, singular), by whether higher is better."""


def equivalent(margin: float) -> str:
    """The verdict of a comparison whose equivalence test against ``margin`` passed."""
    return f"equivalent within ±{margin:g}"


def decide(mean: float, p_adjusted: float, alpha: float, higher_is_better: Optional[bool],
           equivalence_p: Optional[float] = None, margin: Optional[float] = None) -> str:
    """The verdict of a comparison (see the module docstring).

    Args:
        mean: the estimated ``point - baseline``; its sign gives the direction.
        p_adjusted: the Holm-adjusted p-value of the test of no difference (NaN: untestable).
        alpha: the significance level (1 - the confidence level).
        higher_is_better: True / False for metrics with a better direction, None for the others.
        equivalence_p: the Holm-adjusted p-value of the equivalence test, None when there is no margin.
        margin: the equivalence margin that test used.
    """
    if not math.isnan(p_adjusted) and p_adjusted < alpha and mean != 0:
        up = mean > 0
        if higher_is_better is None:
            return HIGHER if up else LOWER
        return BETTER if up == higher_is_better else WORSE
    if equivalence_p is not None and margin is not None and not math.isnan(equivalence_p) and equivalence_p < alpha:
        return equivalent(margin)
    return UNTESTED if math.isnan(p_adjusted) else SAME


def rules_out(low: float, high: float, higher_is_better: Optional[bool], spec: str = ".3f") -> str:
    """What the interval ``[low, high]`` of ``point - baseline`` rules out, in the metric's units (``spec``).

    Rises of the metric are ``gains`` where higher is better, ``losses`` where lower is, and ``rises``
    where neither is; falls are the other word. For [-0.014, +0.049] of an accuracy: ``rules out gains >
    0.049 / losses > 0.014``; for [+0.010, +0.050]: ``rules out gains > 0.050 or < 0.010, and any loss``.
    """
    if math.isnan(low) or math.isnan(high):
        return "rules out nothing (too few runs for an interval)"
    (up, one_up), (down, one_down) = _WORDS[higher_is_better]

    def n(x: float) -> str:
        return format(abs(x), spec)

    if low > 0:
        return f"rules out {up} > {n(high)} or < {n(low)}, and any {one_down}"
    if high < 0:
        return f"rules out {down} > {n(low)} or < {n(high)}, and any {one_up}"
    return f"rules out {up} > {n(high)} / {down} > {n(low)}"
