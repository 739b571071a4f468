"""Statistics for comparing sweep points: confidence intervals, paired tests and verdicts.

Every RL result here is a handful of seeds per setting, so each number comes with its uncertainty:

- :func:`mean_ci`: mean, sample standard deviation and a two-sided Student-t confidence interval
  over seeds (``mean ± t_{n-1, 1-alpha/2} * std / sqrt(n)``).
- :func:`paired_difference`: the difference between two settings paired by seed (the same seed draws
  the same prompts and the same initial sampling stream), its t-interval and the p-value of the paired
  t-test (``scipy.stats.ttest_rel``). Pairing removes the seed-to-seed spread both settings share.
- :func:`paired_bootstrap`: per-problem pairing. With 0/1 scores of the same held-out problems under
  both settings and every seed, resample problems (and seeds) with replacement and take the
  percentile interval of the mean difference; the p-value is the two-sided bootstrap tail
  ``min(1, 2 * min(P(d* <= 0), P(d* >= 0)))``.
- :func:`equivalence_p`: the equivalence test (TOST) of paired differences over seeds against a margin
  ``m``: two one-sided paired t-tests, of ``mean <= -m`` and of ``mean >= m``; its p-value is the larger of
  the two, below alpha exactly when the ``1 - 2 alpha`` t-interval lies inside ``(-m, m)``.
- :func:`verdict`: ``better`` / ``worse`` when the interval excludes 0 (in the direction where
  higher is better), else ``not distinguishable``. A report's verdicts come from Holm-adjusted p-values
  instead (:func:`~tsctl.stages.report.wording.decide`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy import stats as scipy_stats

from tsctl.stages.report.wording import BETTER, HIGHER, LOWER, SAME, WORSE

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
        method: how the interval and p-value were computed (``paired t`` or ``paired bootstrap``).
    """

    diff: Interval
    p_value: float
    method: str


def mean_ci(values: Sequence[float], level: float = LEVEL) -> Interval:
    """Mean, std and the two-sided Student-t interval of ``values`` at ``level``.

    Raises:
        ValueError: ``values`` is empty or ``level`` is not in (0, 1).
    """
    _check_level(level)
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("mean_ci needs at least one value")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, 0.0, 1, math.nan, math.nan)
    std = float(x.std(ddof=1))
    half = float(scipy_stats.t.ppf(0.5 + level / 2, x.size - 1)) * std / math.sqrt(x.size)
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
        p = float(scipy_stats.ttest_rel(a, b).pvalue)
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
    above_low = float(scipy_stats.t.sf((mean + margin) / se, df))  # H0: mean <= -margin
    below_high = float(scipy_stats.t.cdf((mean - margin) / se, df))  # H0: mean >= margin
    return max(above_low, below_high)


def paired_bootstrap(
    setting: np.ndarray, baseline: np.ndarray, level: float = LEVEL, resamples: int = 10000, seed: int = 0
) -> Comparison:
    """Mean per-problem difference with a bootstrap over problems and seeds.

    Args:
        setting: ``[S, P]`` scores (e.g. 0/1 solved) of ``P`` problems under ``S`` seeds.
        baseline: ``[S, P]`` scores of the same problems and seeds under the baseline.
        level: confidence level of the percentile interval.
        resamples: bootstrap draws.
        seed: seed of the resampling generator (the result is a pure function of the inputs).

    Each draw picks ``S`` seeds and ``P`` problems with replacement and averages the paired
    differences over the drawn (seed, problem) cells. The reported std is that of the draws (the
    bootstrap standard error); ``n`` is the number of problems.

    Raises:
        ValueError: the arrays are not both ``[S, P]`` with the same shape.
    """
    _check_level(level)
    a, b = np.asarray(setting, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired_bootstrap needs two [seeds, problems] arrays of one shape; got {a.shape} and {b.shape}")
    diff = a - b
    rng = np.random.default_rng(seed)
    sizes = [min(_CHUNK, resamples - start) for start in range(0, resamples, _CHUNK)]
    draws = np.concatenate([_bootstrap_means(diff, rng, size) for size in sizes])
    low, high = np.quantile(draws, [0.5 - level / 2, 0.5 + level / 2])
    tail = min(float((draws <= 0).mean()), float((draws >= 0).mean()))
    p = min(1.0, 2 * tail)
    return Comparison(Interval(float(diff.mean()), float(draws.std(ddof=1)), diff.shape[1], float(low), float(high)), p, "paired bootstrap")


_CHUNK = 500
"""Bootstrap draws computed together (memory: ``_CHUNK * (seeds + problems)`` counts)."""


def _bootstrap_means(diff: np.ndarray, rng: np.random.Generator, draws: int) -> np.ndarray:
    """``draws`` bootstrap means of ``diff`` [S, P]: seeds and problems drawn with replacement.

    A draw's mean over its drawn cells is ``c_s @ diff @ c_p / (S * P)`` with ``c_s`` [S] and ``c_p``
    [P] the times each seed and problem was drawn (multinomial counts).
    """
    seeds, problems = diff.shape
    c_s = rng.multinomial(seeds, np.full(seeds, 1 / seeds), size=draws).astype(np.float64)
    c_p = rng.multinomial(problems, np.full(problems, 1 / problems), size=draws).astype(np.float64)
    return np.einsum("rs,sp,rp->r", c_s, diff, c_p) / (seeds * problems)


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


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be in (0, 1); got {level}")
