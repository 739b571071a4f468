"""Seeds crossed with problems: the two-way analysis of variance of per-problem held-out scores, its
variance components, and the test of a paired difference that counts both sources of noise once.

A held-out score of run (seed) ``s`` on problem ``p`` is modelled as ``y_sp = mu + a_s + b_p + e_sp``: a seed
effect ``a_s`` (variance ``seed``), a problem effect ``b_p`` (variance ``problem``) and a cell term ``e_sp``, the
seed-by-problem interaction (variance ``seed_x_problem``) plus, for a share of ``n`` sampled answers, their
binomial noise (variance ``binomial``). With ``S`` seeds and ``P`` problems the mean squares of the two-way
table are

    MS_seed    = P * sum_s (ybar_s. - ybar)^2 / (S - 1)          E = P * seed + cell
    MS_problem = S * sum_p (ybar_.p - ybar)^2 / (P - 1)          E = S * problem + cell
    MS_cell    = sum_sp (y_sp - ybar_s. - ybar_.p + ybar)^2 / ((S - 1)(P - 1))     E = cell

with ``cell = seed_x_problem + binomial`` (:func:`mean_squares`). Solving for the components gives
:func:`variance_components`; the binomial part comes from the scores themselves: a share ``y`` of ``n``
independent answers has ``E[y (1 - y)] = pi (1 - pi) (n - 1) / n``, so ``mean(y (1 - y)) / (n - 1)`` estimates
``Var(y | pi)`` without bias. A greedy answer (``n = 1``) is one deterministic draw: it has no binomial part.

:func:`crossed_difference` tests a paired difference ``d_sp = y'_sp - y_sp`` of two settings (the same seeds
and problems) with seed and problem as crossed random effects (a mixed model fitted by the method of
moments on the table of ``d``). Its mean has variance ``seed/S + problem/P + cell/(S P)``, estimated by

    V = MS_seed / (S P) + max(0, MS_problem - MS_cell) / (S P)

with Satterthwaite's degrees of freedom for the combination of mean squares. The seed-by-problem noise is
counted once (in ``MS_seed``), unlike a bootstrap that resamples seeds and problems independently. When the
problems do not disagree more than their cells' noise predicts (``MS_problem <= MS_cell``, as under no effect
at all) this is the paired t-test over the seeds' mean differences, with ``S - 1`` degrees of freedom.

:func:`seed_spread` asks of one setting's table whether its seeds differ by more than the problems' noise:
``MS_seed / MS_cell`` against the F distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special
from scipy import stats as scipy_stats

from tsctl.analysis.stats import LEVEL, Comparison, Interval, check_level

METHOD = "seeds and problems"
"""The name of :func:`crossed_difference`'s test, as the tables print it."""


@dataclass(frozen=True)
class MeanSquares:
    """The mean squares of a ``[S, P]`` table (module docstring) and its size."""

    seed: float
    problem: float
    cell: float
    seeds: int
    problems: int


@dataclass(frozen=True)
class Components:
    """Variance components of per-problem scores (module docstring), each floored at 0.

    Attributes:
        seed: variance of a run's effect on its mean score.
        problem: variance of a problem's difficulty.
        seed_x_problem: variance of a run's score on a problem beyond both (and beyond ``binomial``).
        binomial: the sampling variance of a score from ``n`` sampled answers (0 for greedy).
    """

    seed: float
    problem: float
    seed_x_problem: float
    binomial: float


def mean_squares(table: np.ndarray) -> MeanSquares:
    """The seed, problem and cell mean squares of ``table`` [S, P] (S, P >= 2).

    Raises:
        ValueError: ``table`` is not two-dimensional with at least two seeds and two problems.
    """
    y = np.asarray(table, dtype=np.float64)
    if y.ndim != 2 or min(y.shape) < 2:
        raise ValueError(f"need a [seeds, problems] table with at least 2 of each; got shape {y.shape}")
    seeds, problems = y.shape
    grand, by_seed, by_problem = y.mean(), y.mean(axis=1), y.mean(axis=0)
    cell = y - by_seed[:, None] - by_problem[None, :] + grand
    return MeanSquares(
        problems * float(((by_seed - grand) ** 2).sum()) / (seeds - 1),
        seeds * float(((by_problem - grand) ** 2).sum()) / (problems - 1),
        float((cell**2).sum()) / ((seeds - 1) * (problems - 1)),
        seeds,
        problems,
    )


def variance_components(scores: np.ndarray, samples: int = 1) -> Components:
    """The variance components (module docstring) of ``scores`` [S, P]: each problem's share solved of
    ``samples`` sampled answers under each seed (``samples=1``: greedy 0/1).

    Raises:
        ValueError: as :func:`mean_squares`, or ``samples`` < 1.
    """
    if samples < 1:
        raise ValueError(f"samples must be at least 1; got {samples}")
    y = np.asarray(scores, dtype=np.float64)
    ms = mean_squares(y)
    binomial = float((y * (1 - y)).mean()) / (samples - 1) if samples > 1 else 0.0
    return Components(
        max(0.0, (ms.seed - ms.cell) / ms.problems),
        max(0.0, (ms.problem - ms.cell) / ms.seeds),
        max(0.0, ms.cell - binomial),
        binomial,
    )


@dataclass(frozen=True)
class Differences:
    """:func:`crossed_differences` of ``N`` pairs of tables, each field ``[N]``: the mean difference, its standard error,
    the t-interval's ends and the two-sided p-value."""

    mean: np.ndarray
    se: np.ndarray
    low: np.ndarray
    high: np.ndarray
    p: np.ndarray


def crossed_differences(setting: np.ndarray, baseline: np.ndarray, level: float = LEVEL) -> Differences:
    """``setting - baseline`` over seeds and problems, both random (module docstring), for ``N`` pairs at once.

    Args:
        setting: ``[N, S, P]`` scores: ``N`` tables of ``P`` problems under ``S`` seeds (S >= 2).
        baseline: ``[N, S, P]`` scores of the same problems and seeds under the baseline.
        level: confidence level of the t-intervals.

    Returns:
        Each pair's mean difference, standard error, t-interval at Satterthwaite's degrees of freedom and two-sided
        p-value, as :func:`crossed_difference` gives one.

    Raises:
        ValueError: the arrays are not both ``[N, S, P]`` of one shape with S >= 2.
    """
    check_level(level)
    a, b = np.asarray(setting, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.ndim != 3 or a.shape != b.shape or a.shape[1] < 2 or a.shape[2] < 1:
        raise ValueError(f"crossed_differences needs two [pairs, seeds, problems] arrays of one shape, >= 2 seeds; got {a.shape} and {b.shape}")
    d = a - b
    _, seeds, problems = d.shape
    mean, by_seed, by_problem = d.mean(axis=(1, 2)), d.mean(axis=2), d.mean(axis=1)
    ms_seed = problems * ((by_seed - mean[:, None]) ** 2).sum(axis=1) / (seeds - 1)
    if problems == 1:  # the paired t over seeds
        ms_problem = ms_cell = extra = np.zeros_like(mean)
        df = np.full_like(mean, seeds - 1)
    else:
        cells = (seeds - 1) * (problems - 1)
        ms_problem = seeds * ((by_problem - mean[:, None]) ** 2).sum(axis=1) / (problems - 1)
        ms_cell = ((d - by_seed[:, :, None] - by_problem[:, None, :] + mean[:, None, None]) ** 2).sum(axis=(1, 2)) / cells
        extra = np.maximum(0.0, ms_problem - ms_cell)
        with np.errstate(divide="ignore", invalid="ignore"):  # Satterthwaite: var(sum c_i MS_i) ~ sum c_i^2 MS_i^2 * 2 / df_i
            satterthwaite = (ms_seed + extra) ** 2 / (ms_seed**2 / (seeds - 1) + ms_problem**2 / (problems - 1) + ms_cell**2 / cells)
        df = np.where(extra > 0, satterthwaite, seeds - 1)
    total = ms_seed + extra
    return t_differences(mean, total, seeds * problems, df, level)


def t_differences(mean: np.ndarray, total: np.ndarray, cells: int, df: np.ndarray | int, level: float) -> Differences:
    """The t-interval and two-sided p of ``N`` mean differences ``mean`` ``[N]`` whose variance is ``total / cells``
    (``total`` ``[N]``: the combination of mean squares), on ``df`` degrees of freedom; a difference with no variance
    is exact (p 0 when it is not 0, else 1)."""
    flat = total == 0
    se = np.sqrt(total / (cells))
    with np.errstate(divide="ignore", invalid="ignore"):
        half = np.where(flat, 0.0, special.stdtrit(df, 0.5 + level / 2) * se)
        p = np.where(flat, np.where(mean != 0, 0.0, 1.0), 2 * special.stdtr(df, -np.abs(mean / se)))
    return Differences(mean, se, mean - half, mean + half, p)


def crossed_difference(setting: np.ndarray, baseline: np.ndarray, level: float = LEVEL) -> Comparison:
    """``setting - baseline`` over seeds and problems, both random (module docstring).

    Args:
        setting: ``[S, P]`` scores of ``P`` problems under ``S`` seeds (S >= 2).
        baseline: ``[S, P]`` scores of the same problems and seeds under the baseline.
        level: confidence level of the t-interval.

    Returns:
        The mean difference with its standard error as ``std``, ``n = S`` and the t-interval at Satterthwaite's
        degrees of freedom; the two-sided p-value. With zero variance the interval is the mean itself and the
        p-value 0 (mean non-zero) or 1. With one problem it is the paired t over seeds.

    Raises:
        ValueError: the arrays are not both ``[S, P]`` of one shape with S >= 2.
    """
    a, b = np.asarray(setting, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] < 2 or a.shape[1] < 1:
        raise ValueError(f"crossed_difference needs two [seeds, problems] arrays of one shape, >= 2 seeds; got {a.shape} and {b.shape}")
    found = crossed_differences(a[None], b[None], level)
    mean, se, low, high, p = (float(v[0]) for v in (found.mean, found.se, found.low, found.high, found.p))
    return Comparison(Interval(mean, se, a.shape[0], low, high), p, METHOD)


def seed_spread(scores: np.ndarray) -> tuple[float, float]:
    """How much more the seeds' mean scores spread than drawing the problems alone predicts, for one setting's
    ``scores`` [S, P]: the variance ratio ``F = MS_seed / MS_cell`` (1 when seeds differ only by which problems
    their cells' noise lands on) and its p-value, ``P(F(S - 1, (S - 1)(P - 1)) >= F)``. NaN, NaN when the cells
    do not vary.

    Raises:
        ValueError: as :func:`mean_squares`.
    """
    ms = mean_squares(scores)
    if ms.cell == 0:
        return math.nan, math.nan
    ratio = ms.seed / ms.cell
    return ratio, float(scipy_stats.f.sf(ratio, ms.seeds - 1, (ms.seeds - 1) * (ms.problems - 1)))
