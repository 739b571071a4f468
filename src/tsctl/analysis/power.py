"""The smallest effect a comparison's design could detect: the minimum detectable effect (MDE) of the
paired t-test over seeds.

With ``n`` seeds whose paired differences ``point - baseline`` have standard deviation ``s``, the two-sided
paired t-test at level ``alpha`` rejects when ``|T| > c``, ``c = t_{n-1, 1-alpha/2}``. If the true difference
is ``delta``, ``T`` follows the noncentral t distribution with ``n - 1`` degrees of freedom and noncentrality
``lambda = delta * sqrt(n) / s``, so the test's power is

    power(delta) = P(T' > c) + P(T' < -c),    T' ~ nct(n - 1, lambda).

The MDE is the ``delta`` whose power is the target (80% by default): ``MDE = lambda* * s / sqrt(n)`` with
``lambda*`` solving ``power = target``. It is close to, and slightly above, the textbook approximation
``(t_{n-1, 1-alpha/2} + t_{n-1, power}) * s / sqrt(n)``. It takes the observed ``s`` as the true one, so it
describes this design at this spread, one comparison at a time (before any multiple-comparison correction). When a
comparison's runs come from two or more warm-up models, the units are the warm-up models (:mod:`~tsctl.analysis.nested`):
``n`` is their number and ``s`` the spread of their mean differences, whose variance is the warm-up model's component
plus that of the mean of ``S`` seeds: more seeds per warm-up model cannot take it below the first.
"""

from __future__ import annotations

import math

from scipy import optimize
from scipy import stats as scipy_stats

POWER = 0.8
"""The power at which the minimum detectable effect is given."""


def _power(nc: float, df: int, critical: float) -> float:
    """``P(T' > critical) + P(T' < -critical)`` for ``T' ~ nct(df, nc)``; a tail too small for scipy's
    noncentral t (NaN far out) counts as 0."""
    return sum(0.0 if math.isnan(x) else float(x) for x in (scipy_stats.nct.sf(critical, df, nc), scipy_stats.nct.cdf(-critical, df, nc)))


def min_detectable_effect(std: float, n: int, alpha: float = 0.05, power: float = POWER) -> float:
    """The difference the paired t-test over ``n`` seeds detects with probability ``power`` (see the
    module docstring); NaN with fewer than two seeds, 0 when the differences do not spread.

    Raises:
        ValueError: ``alpha`` or ``power`` is not in (0, 1), or ``power`` is at most ``alpha``.
    """
    if not (0 < alpha < 1 and alpha < power < 1):
        raise ValueError(f"need 0 < alpha < power < 1; got alpha={alpha}, power={power}")
    if n < 2 or math.isnan(std):
        return math.nan
    if std == 0:
        return 0.0
    df, critical = n - 1, float(scipy_stats.t.ppf(1 - alpha / 2, n - 1))
    start = critical + float(scipy_stats.t.ppf(power, df))  # the approximation, a little below the root

    def gap(nc: float) -> float:
        return _power(nc, df, critical) - power

    high = start
    while gap(high) < 0:
        high *= 2
    nc = optimize.brentq(gap, 0.0, high, xtol=1e-12)
    return nc * std / math.sqrt(n)
