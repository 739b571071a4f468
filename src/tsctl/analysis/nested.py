"""Warm-up models as a random unit: training seeds nested in warm-up models, crossed with problems. The analysis of
variance of a paired difference's per-problem table, its variance components, and the test of its mean that counts
which warm-up models were drawn.

Every run of a sweep starts from a warmed-up built-in model (``tsctl warmup``, ``model.warmup.seed``). When a sweep's
runs come from ``W`` >= 2 warm-up models, ``S`` training seeds under each, the paired difference of two settings on
problem ``p`` under warm-up ``w`` and seed ``s`` (the ``s``-th seed of that warm-up: seeds of two warm-ups are not
the same unit) is modelled as

    d_wsp = mu + a_w + b_s(w) + c_p + (ac)_wp + e_wsp

with a warm-up effect ``a_w`` (variance ``warmup``), a training seed's effect within its warm-up ``b_s(w)``
(``seed``), a problem effect ``c_p`` (``problem``), a warm-up-by-problem effect ``(ac)_wp`` (``warmup_x_problem``:
which problems the setting helps depends on the model it starts from) and a cell term ``e_wsp`` (``residual``: the
seed-by-problem interaction and the binomial noise of sampled answers). In a balanced table (every warm-up ``S``
seeds, every run ``P`` problems) the mean squares are

    MS_warmup  = S P sum_w (dbar_w.. - dbar)^2 / (W - 1)
               E = S P warmup + P seed + S warmup_x_problem + residual
    MS_seed    = P sum_ws (dbar_ws. - dbar_w..)^2 / (W (S - 1))
               E = P seed + residual
    MS_problem = W S sum_p (dbar_..p - dbar)^2 / (P - 1)
               E = W S problem + S warmup_x_problem + residual
    MS_wxp     = S sum_wp (dbar_w.p - dbar_w.. - dbar_..p + dbar)^2 / ((W - 1)(P - 1))
               E = S warmup_x_problem + residual
    MS_cell    = sum_wsp (d_wsp - dbar_ws. - dbar_w.p + dbar_w..)^2 / (W (S - 1)(P - 1))
               E = residual

(:func:`mean_squares`; one without degrees of freedom is NaN). Solving for the components gives
:func:`variance_components`. The mean difference has variance

    Var(dbar) = warmup / W + seed / (W S) + problem / P + warmup_x_problem / (W P) + residual / (W S P)
              = E[MS_warmup + MS_problem - MS_wxp] / (W S P)

which :func:`nested_differences` estimates, as :mod:`~tsctl.analysis.crossed` does for one warm-up model, by

    V = (MS_warmup + max(0, MS_problem - MS_wxp)) / (W S P)

on ``W - 1`` degrees of freedom, those of ``MS_warmup`` (the containment degrees of freedom). The seeds' spread
within each warm-up model and their seed-by-problem noise are counted once, inside ``MS_warmup``. When the problems do
not disagree more than the warm-up-by-problem noise predicts (``MS_problem <= MS_wxp``, as under no effect at all) it is
the t-test over the warm-up models' mean differences, exact for normal errors; with one problem (a metric without
per-problem results) it is that t-test always; otherwise it is conservative. Satterthwaite's degrees of freedom, which
:mod:`~tsctl.analysis.crossed` gives its combination of mean squares, are not used here: they are computed from
``MS_warmup``'s own estimate, which with few warm-up models is often far below its expectation, and then both shrink
``V`` and raise the degrees of freedom. Simulated with the variance components of the records' two warm-up models
(``tests/test_report_calibration.py``; greedy, pass@1 and pass@8, 20000 nulls each) they called 2.3-2.8 times the
nominal share of nulls at 0.05 / 12 (the threshold a Holm family of 12 needs first) for two warm-up models, and 2.9-15
times (pass@1 and pass@8) with a problem-by-setting effect of variance 0.02 for two or four; ``W - 1`` called at most the
nominal share in every case (0.4-1.0 times it without that effect). With one warm-up model ``warmup``
cannot be estimated and ``warmup_x_problem`` is part of the fixed model's problem effects: the test is
:mod:`~tsctl.analysis.crossed`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tsctl.analysis.crossed import Differences, t_differences
from tsctl.analysis.stats import LEVEL, Comparison, Interval, check_level

METHOD = "warm-ups, seeds and problems"
"""The name of :func:`nested_difference`'s test, as the tables print it."""


@dataclass(frozen=True)
class MeanSquares:
    """The mean squares of a ``[W, S, P]`` table (module docstring; NaN without degrees of freedom) and its size."""

    warmup: float
    seed: float
    problem: float
    warmup_x_problem: float
    cell: float
    warmups: int
    seeds: int
    problems: int


@dataclass(frozen=True)
class Components:
    """Variance components of a paired difference's per-problem table (module docstring), each floored at 0; NaN
    where the design cannot estimate one (``warmup`` from one warm-up model, ``seed`` and ``residual`` from one seed
    per warm-up model, ``problem``, ``warmup_x_problem`` and ``residual`` without per-problem results).

    Attributes:
        warmup: variance of a warm-up model's effect on the difference.
        seed: variance of a training seed's effect within its warm-up model.
        problem: variance of a problem's effect.
        warmup_x_problem: variance of a warm-up model's effect on a problem beyond both (with one warm-up model it is
            part of ``problem``).
        residual: variance of a run's difference on a problem beyond all of them (seed-by-problem and binomial).
    """

    warmup: float
    seed: float
    problem: float
    warmup_x_problem: float
    residual: float


def _table(table: np.ndarray) -> np.ndarray:
    """``table`` as a float ``[W, S, P]`` array.

    Raises:
        ValueError: it is not three-dimensional with at least one of each.
    """
    d = np.asarray(table, dtype=np.float64)
    if d.ndim != 3 or min(d.shape) < 1:
        raise ValueError(f"need a [warm-ups, seeds, problems] table; got shape {d.shape}")
    return d


def _ms(squares: float, df: int) -> float:
    """``squares / df``; NaN without degrees of freedom."""
    return squares / df if df > 0 else math.nan


def mean_squares(table: np.ndarray) -> MeanSquares:
    """The five mean squares (module docstring) of ``table`` [W, S, P] (W, S, P >= 1).

    Raises:
        ValueError: ``table`` is not a ``[W, S, P]`` array.
    """
    d = _table(table)
    warmups, seeds, problems = d.shape
    grand = d.mean()
    by_warmup, by_run, by_problem, by_warmup_problem = d.mean(axis=(1, 2)), d.mean(axis=2), d.mean(axis=(0, 1)), d.mean(axis=1)
    interaction = by_warmup_problem - by_warmup[:, None] - by_problem[None, :] + grand
    cell = d - by_run[:, :, None] - by_warmup_problem[:, None, :] + by_warmup[:, None, None]
    return MeanSquares(
        _ms(seeds * problems * float(((by_warmup - grand) ** 2).sum()), warmups - 1),
        _ms(problems * float(((by_run - by_warmup[:, None]) ** 2).sum()), warmups * (seeds - 1)),
        _ms(warmups * seeds * float(((by_problem - grand) ** 2).sum()), problems - 1),
        _ms(seeds * float((interaction**2).sum()), (warmups - 1) * (problems - 1)),
        _ms(float((cell**2).sum()), warmups * (seeds - 1) * (problems - 1)),
        warmups,
        seeds,
        problems,
    )


def variance_components(table: np.ndarray) -> Components:
    """The variance components (module docstring) of a paired difference's ``table`` [W, S, P]: each problem's
    difference under each warm-up model and seed; ``P = 1`` for a metric without per-problem results, whose ``seed``
    is then the whole spread of runs within a warm-up model.

    Raises:
        ValueError: ``table`` is not a ``[W, S, P]`` array.
    """
    ms = mean_squares(table)
    w, s, p = ms.warmups, ms.seeds, ms.problems
    if p == 1:
        return Components(float(np.maximum(0.0, (ms.warmup - ms.seed) / s)), ms.seed, math.nan, math.nan, math.nan)
    beyond = ms.warmup_x_problem if w > 1 else ms.cell  # one warm-up model: its problem effects are the problems'
    return Components(
        float(np.maximum(0.0, (ms.warmup - ms.seed - ms.warmup_x_problem + ms.cell) / (s * p))),
        float(np.maximum(0.0, (ms.seed - ms.cell) / p)),
        float(np.maximum(0.0, (ms.problem - beyond) / (w * s))),
        float(np.maximum(0.0, (ms.warmup_x_problem - ms.cell) / s)),
        float(np.maximum(0.0, ms.cell)),
    )


def nested_differences(setting: np.ndarray, baseline: np.ndarray, level: float = LEVEL) -> Differences:
    """``setting - baseline`` over warm-up models, seeds nested in them and problems, all random (module docstring),
    for ``N`` pairs at once.

    Args:
        setting: ``[N, W, S, P]`` scores: ``N`` tables of ``P`` problems under ``S`` seeds of each of ``W`` warm-up
            models (W >= 2).
        baseline: ``[N, W, S, P]`` scores of the same problems, warm-up models and seeds under the baseline.
        level: confidence level of the t-intervals.

    Returns:
        Each pair's mean difference, standard error, t-interval on ``W - 1`` degrees of freedom and two-sided p-value,
        as :func:`nested_difference` gives one.

    Raises:
        ValueError: the arrays are not both ``[N, W, S, P]`` of one shape with W >= 2.
    """
    check_level(level)
    a, b = np.asarray(setting, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.ndim != 4 or a.shape != b.shape or a.shape[1] < 2 or min(a.shape) < 1:
        raise ValueError(f"nested_differences needs two [pairs, warm-ups, seeds, problems] arrays of one shape, >= 2 warm-ups; "
                         f"got {a.shape} and {b.shape}")
    d = a - b
    _, warmups, seeds, problems = d.shape
    mean, by_warmup = d.mean(axis=(1, 2, 3)), d.mean(axis=(2, 3))
    ms_warmup = seeds * problems * ((by_warmup - mean[:, None]) ** 2).sum(axis=1) / (warmups - 1)
    extra = np.zeros_like(mean)
    if problems > 1:  # with one problem: the t-test over the warm-up models' mean differences
        by_problem, by_warmup_problem = d.mean(axis=(1, 2)), d.mean(axis=2)
        ms_problem = warmups * seeds * ((by_problem - mean[:, None]) ** 2).sum(axis=1) / (problems - 1)
        residual = by_warmup_problem - by_warmup[:, :, None] - by_problem[:, None, :] + mean[:, None, None]
        ms_interaction = seeds * (residual**2).sum(axis=(1, 2)) / ((warmups - 1) * (problems - 1))
        extra = np.maximum(0.0, ms_problem - ms_interaction)
    df = warmups - 1
    total = ms_warmup + extra
    return t_differences(mean, total, warmups * seeds * problems, df, level)


def nested_difference(setting: np.ndarray, baseline: np.ndarray, level: float = LEVEL) -> Comparison:
    """``setting - baseline`` over warm-up models, seeds nested in them and problems, all random (module docstring).

    Args:
        setting: ``[W, S, P]`` scores of ``P`` problems under ``S`` seeds of each of ``W`` warm-up models (W >= 2).
        baseline: ``[W, S, P]`` scores of the same problems, warm-up models and seeds under the baseline.
        level: confidence level of the t-interval.

    Returns:
        The mean difference with its standard error as ``std``, ``n = W`` and the t-interval on ``W - 1`` degrees of
        freedom; the two-sided p-value. With zero variance the interval is the mean itself and the
        p-value 0 (mean non-zero) or 1. With one problem it is the t-test over the warm-up models' mean differences.

    Raises:
        ValueError: the arrays are not both ``[W, S, P]`` of one shape with W >= 2.
    """
    a, b = np.asarray(setting, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.ndim != 3 or a.shape != b.shape or a.shape[0] < 2 or min(a.shape) < 1:
        raise ValueError(f"nested_difference needs two [warm-ups, seeds, problems] arrays of one shape, >= 2 warm-ups; "
                         f"got {a.shape} and {b.shape}")
    found = nested_differences(a[None], b[None], level)
    mean, se, low, high, p = (float(v[0]) for v in (found.mean, found.se, found.low, found.high, found.p))
    return Comparison(Interval(mean, se, a.shape[0], low, high), p, METHOD)


def contributions(components: Components, warmups: int, seeds: int, problems: int) -> Components:
    """Each component's term of the mean difference's variance (module docstring: ``warmup / W``, ``seed / (W S)``,
    ``problem / P``, ``warmup_x_problem / (W P)``, ``residual / (W S P)``) for ``W`` warm-up models, ``S`` seeds each and
    ``P`` problems; NaN stays NaN."""
    c, w, s, p = components, warmups, seeds, problems
    return Components(c.warmup / w, c.seed / (w * s), c.problem / p, c.warmup_x_problem / (w * p), c.residual / (w * s * p))
