"""Statistics for comparing sweep points: confidence intervals, paired tests and verdicts.

Every RL result here is a handful of seeds per setting, so each number comes with its uncertainty:

- :func:`mean_ci`: mean, sample standard deviation and a two-sided Student-t confidence interval
  over seeds (``mean ± t_{n-1, 1-alpha/2} * std / sqrt(n)``).
- :func:`paired_difference`: the difference between two settings paired by seed (the same seed draws
  the same prompts and the same initial sampling stream), its t-interval and the p-value of the paired
  t-test (:func:`t_two_sided_p` of ``mean / (std / sqrt(n))`` on ``n - 1`` degrees of freedom). Pairing removes the seed-to-seed spread both settings share.
- per-problem pairing (the same held-out problems under both settings and every seed) is tested with seeds
  and problems as crossed random effects, in :mod:`~tsctl.analysis.crossed`.
- :func:`equivalence_p`: the equivalence test (TOST) of paired differences over seeds against a margin
  ``m``: two one-sided paired t-tests, of ``mean <= -m`` and of ``mean >= m``; its p-value is the larger of
  the two, below alpha exactly when the ``1 - 2 alpha`` t-interval lies inside ``(-m, m)``.
- :func:`verdict`: ``better`` / ``worse`` when the interval excludes 0 (in the direction where
  higher is better), else ``not distinguishable``. A report's verdicts come from Holm-adjusted p-values
  instead (:func:`~tsctl.analysis.wording.decide`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import special

from tsctl.analysis.wording import BETTER, HIGHER, LOWER, SAME, WORSE

LEVEL = 0.95
"""Default confidence level of every interval."""


@dataclass(frozen=True)
class Interval:
    """A mean with its spread and confidence interval.

    Attributes:
        mean: the sample mean.
        std: sample standard deviation (Bessel-corrected; 0 for one value).
        n: number of values.
        low, high: the confidence interval (NaN with fewer than two values).
    """

    mean: float
    std: float
    n: int
    low: float
    high: float

    @property
    def half_width(self) -> float:
        """Half the interval's width (NaN when there is no interval)."""
        return (self.high - self.low) / 2


@dataclass(frozen=True)
class Comparison:
    """A setting compared with a baseline.

    Attributes:
        diff: the estimate of (setting - baseline) with its interval.
        p_value: two-sided p-value of the test of ``diff == 0`` (NaN when untestable).
        method: how the interval and p-value were computed (``paired t``, or
            :data:`~tsctl.analysis.crossed.METHOD`).
    """

    diff: Interval
    p_value: float
    method: str


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t on ``df`` degrees of freedom: ``scipy.stats.t.ppf(q, df)``, which calls
    the same ``scipy.special.stdtrit`` after checks that cost 100x its time (simulations call it thousands of times)."""
    return float(special.stdtrit(df, q))


def t_two_sided_p(t: float, df: float) -> float:
    """The two-sided p-value of Student's ``t`` on ``df`` degrees of freedom: ``2 * scipy.stats.t.sf(|t|, df)``,
    through ``scipy.special.stdtr`` as that does."""
    return float(2 * special.stdtr(df, -abs(t)))


def mean_ci(values: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean, std and the two-sided Student-t interval of ``values`` at ``level``.

    Raises:
        ValueError: ``values`` is empty or ``level`` is not in (0, 1).
    """
    check_level(level)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, 0.0, 1, math.nan, math.nan)
    std = float(x.std(ddof=1))
    half = t_quantile(0.5 + level / 2, x.size - 1) * std / math.sqrt(x.size)
    return Interval(mean, std, int(x.size), mean - half, mean + half)


def paired_difference(setting: Sequence[float], baseline: Sequence[float], level: float = LEVEL) -> Comparison:
    """``setting - baseline`` paired element by element (by seed): t-interval and paired t-test p-value.

    With identical differences (zero spread) the interval is that single value and the p-value is 0
    when it is non-zero, 1 when it is zero.

    Raises:
        ValueError: the two sequences differ in length or are empty.
    """
    a, b = np.asarray(setting, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired values need two equal, non-empty lengths; got {a.size} and {b.size}")
    interval = mean_ci(a - b, level)
    if a.size < 2:
        p = math.nan
    elif interval.std == 0:
        p = 0.0 if interval.mean != 0 else 1.0
        interval = Interval(interval.mean, 0.0, interval.n, interval.mean, interval.mean)
    else:
        p = t_two_sided_p(interval.mean / (interval.std / math.sqrt(interval.n)), interval.n - 1)
    return Comparison(interval, p, "paired t")


def equivalence_p(setting: Sequence[float], baseline: Sequence[float], margin: float) -> float:
    """p-value of the paired equivalence test (TOST, module docstring) of ``setting - baseline`` over seeds
    against ``margin`` > 0. NaN with fewer than two pairs; with identical differences 0 when their value lies
    inside ``(-margin, margin)``, else 1.

    Raises:
        ValueError: the sequences differ in length, or ``margin`` is not positive.
    """
    if not margin > 0:
        raise ValueError(f"the equivalence margin must be positive; got {margin}")
    d = np.asarray(setting, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    if d.size < 2:
        return math.nan
    mean, std = float(d.mean()), float(d.std(ddof=1))
    if std == 0:
        return 0.0 if abs(mean) < margin else 1.0
    se, df = std / math.sqrt(d.size), d.size - 1
    above_low = float(special.stdtr(df, -(mean + margin) / se))  # H0: mean <= -margin: P(T >= t)
    below_high = float(special.stdtr(df, (mean - margin) / se))  # H0: mean >= margin: P(T <= t)
    return max(above_low, below_high)


def verdict(comparison: Comparison, higher_is_better: Optional[bool] = True) -> str:
    """``better`` / ``worse`` when the interval excludes 0, else ``not distinguishable``.

    With ``higher_is_better=None`` (a metric with no preferred direction, such as entropy) the
    verdict says ``higher`` or ``lower`` instead.
    """
    d = comparison.diff
    if math.isnan(d.low) or math.isnan(d.high) or d.low <= 0 <= d.high:
        return SAME
    up = d.low > 0
    if higher_is_better is None:
        return HIGHER if up else LOWER
    return BETTER if up == higher_is_better else WORSE


def check_level(level: float) -> None:
    """Raise ValueError unless ``level`` lies in (0, 1)."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1); got {level}")
