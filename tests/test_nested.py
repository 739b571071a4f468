"""The nested analysis of variance (:mod:`tsctl.analysis.nested`): warm-up models random, training seeds nested in them,
crossed with problems. Its mean squares and components on a table worked by hand, its expected mean squares and the
variance of the mean difference checked exactly against the model's covariance, and its test against the t over the
warm-up models' means and the two-way test of one warm-up model."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from tsctl.analysis import crossed
from tsctl.analysis.nested import (
    METHOD,
    Components,
    contributions,
    mean_squares,
    nested_difference,
    nested_differences,
    variance_components,
)
from tsctl.analysis.stats import paired_difference

HAND = np.array([[[0.5, 0.3], [0.3, 0.1]], [[0.1, -0.1], [-0.1, -0.1]]])
"""d[w, s, p]: 2 warm-up models x 2 seeds x 2 problems.

run means (w, s): 0.4, 0.2 | 0.0, -0.1; warm-up means 0.3, -0.05; grand mean 0.125; problem means 0.2, 0.05;
warm-up x problem means: w0 0.4, 0.2 | w1 0.0, -0.1.

MS_warmup  = S P sum_w (0.3 - 0.125)^2 + (-0.05 - 0.125)^2 / 1 = 4 * 2 * 0.175^2               = 0.245
MS_seed    = P (0.1^2 + 0.1^2 + 0.05^2 + 0.05^2) / (W (S - 1)) = 2 * 0.025 / 2                   = 0.025
MS_problem = W S (0.075^2 + 0.075^2) / (P - 1) = 4 * 0.01125                                     = 0.045
MS_wxp     = S sum (wp - w - p + g)^2 / 1: the four terms are +-0.025: 2 * 4 * 0.025^2           = 0.005
MS_cell    = sum (d - run - wp + w)^2 / (W (S - 1)(P - 1)): warm-up 0's terms are all 0, warm-up 1's +-0.05:
             4 * 0.05^2 / 2                                                                       = 0.005
"""


def test_mean_squares_of_a_table_worked_by_hand():
    ms = mean_squares(HAND)
    assert (ms.warmup, ms.seed, ms.problem, ms.warmup_x_problem, ms.cell) == pytest.approx((0.245, 0.025, 0.045, 0.005, 0.005))
    assert (ms.warmups, ms.seeds, ms.problems) == (2, 2, 2)


def test_variance_components_of_a_table_worked_by_hand():
    # residual = MS_cell = 0.005; warm-up x problem = (0.005 - 0.005) / S = 0; problem = (0.045 - 0.005) / (W S) = 0.01;
    # seed = (0.025 - 0.005) / P = 0.01; warm-up = (0.245 - 0.025 - 0.005 + 0.005) / (S P) = 0.055
    c = variance_components(HAND)
    assert (c.warmup, c.seed, c.problem, c.warmup_x_problem, c.residual) == pytest.approx((0.055, 0.01, 0.01, 0.0, 0.005))
    # their terms of Var(mean): 0.055 / 2, 0.01 / 4, 0.01 / 2, 0 / 4, 0.005 / 8
    terms = contributions(c, 2, 2, 2)
    assert (terms.warmup, terms.seed, terms.problem, terms.warmup_x_problem, terms.residual) == pytest.approx(
        (0.0275, 0.0025, 0.005, 0.0, 0.000625))


def test_nested_difference_of_a_table_worked_by_hand():
    # V = (MS_warmup + max(0, MS_problem - MS_wxp)) / (W S P) = (0.245 + 0.04) / 8 = 0.035625 on W - 1 = 1 degree of
    # freedom (Cauchy: p = 1 - 2 atan(t) / pi)
    result = nested_difference(HAND, np.zeros_like(HAND))
    se, df = math.sqrt(0.035625), 1
    half = scipy_stats.t.ppf(0.975, df) * se
    assert result.p_value == pytest.approx(1 - 2 * math.atan(0.125 / se) / math.pi)
    assert (result.diff.mean, result.diff.std, result.diff.n) == pytest.approx((0.125, se, 2))
    assert (result.diff.low, result.diff.high) == pytest.approx((0.125 - half, 0.125 + half))
    assert result.p_value == pytest.approx(2 * scipy_stats.t.sf(0.125 / se, df))
    assert result.method == METHOD == "warm-ups, seeds and problems"


def covariance(c: Components, warmups: int, seeds: int, problems: int) -> np.ndarray:
    """The model's covariance of the flattened ``[W, S, P]`` table (module docstring of tsctl.analysis.nested), built
    cell pair by cell pair from the components."""
    cells = list(itertools.product(range(warmups), range(seeds), range(problems)))
    out = np.zeros((len(cells), len(cells)))
    for i, (w, s, p) in enumerate(cells):
        for j, (w2, s2, p2) in enumerate(cells):
            out[i, j] = (c.warmup * (w == w2) + c.seed * (w == w2 and s == s2) + c.problem * (p == p2)
                         + c.warmup_x_problem * (w == w2 and p == p2) + c.residual * (i == j))
    return out


@pytest.mark.parametrize("design", [(3, 2, 4), (2, 3, 5), (4, 2, 2)])
def test_expected_mean_squares_and_the_variance_of_the_mean_are_the_docstring_s(design):
    # a mean square is a quadratic form y'Ay / df, so under y ~ N(0, C) its expectation is tr(A C) / df =
    # sum_k lambda_k MS(v_k) over C's eigenvectors v_k: exact, with no sampling
    w, s, p = design
    c = Components(warmup=0.3, seed=0.2, problem=0.5, warmup_x_problem=0.7, residual=1.1)
    cov = covariance(c, w, s, p)
    eigenvalues, vectors = np.linalg.eigh(cov)
    expected = np.zeros(5)
    for value, vector in zip(eigenvalues, vectors.T):
        ms = mean_squares(vector.reshape(w, s, p))
        expected += value * np.array([ms.warmup, ms.seed, ms.problem, ms.warmup_x_problem, ms.cell])
    residual = c.residual
    assert expected == pytest.approx([
        s * p * c.warmup + p * c.seed + s * c.warmup_x_problem + residual,
        p * c.seed + residual,
        w * s * c.problem + s * c.warmup_x_problem + residual,
        s * c.warmup_x_problem + residual,
        residual,
    ])
    variance_of_mean = cov.sum() / (w * s * p) ** 2
    terms = contributions(c, w, s, p)
    assert variance_of_mean == pytest.approx(terms.warmup + terms.seed + terms.problem + terms.warmup_x_problem + terms.residual)
    assert variance_of_mean == pytest.approx((expected[0] + expected[2] - expected[3]) / (w * s * p))


def test_the_estimate_of_the_mean_s_variance_is_unbiased_and_its_interval_covers():
    # 4000 tables drawn from the model: the mean of V (nested_differences' se squared, before any flooring matters:
    # MS_problem far above MS_wxp here) is the exact variance of the grand mean, as is the spread of the drawn means;
    # on W - 1 degrees of freedom the interval covers at least 95% of the time (more: the problems' part of V is known
    # better than W - 1 degrees of freedom say)
    w, s, p, n = 3, 2, 6, 4000
    c = Components(warmup=0.02, seed=0.005, problem=0.05, warmup_x_problem=0.004, residual=0.03)
    rng = np.random.default_rng(0)
    d = (rng.normal(0, math.sqrt(c.warmup), (n, w, 1, 1)) + rng.normal(0, math.sqrt(c.seed), (n, w, s, 1))
         + rng.normal(0, math.sqrt(c.problem), (n, 1, 1, p)) + rng.normal(0, math.sqrt(c.warmup_x_problem), (n, w, 1, p))
         + rng.normal(0, math.sqrt(c.residual), (n, w, s, p)))
    found = nested_differences(d, np.zeros_like(d))
    terms = contributions(c, w, s, p)
    exact = terms.warmup + terms.seed + terms.problem + terms.warmup_x_problem + terms.residual
    assert float((found.se**2).mean()) == pytest.approx(exact, rel=0.05)
    assert float(found.mean.var()) == pytest.approx(exact, rel=0.05)
    covered = float(((found.low <= 0) & (0 <= found.high)).mean())
    assert covered >= 0.945


def test_with_one_problem_it_is_the_t_over_the_warm_up_models_means():
    rng = np.random.default_rng(1)
    setting, baseline = rng.normal(size=(3, 2, 1)), rng.normal(size=(3, 2, 1))
    found = nested_difference(setting, baseline)
    t = paired_difference(setting.mean(axis=(1, 2)), baseline.mean(axis=(1, 2)))
    assert (found.diff.mean, found.diff.low, found.diff.high, found.p_value) == pytest.approx((t.diff.mean, t.diff.low, t.diff.high, t.p_value))
    assert found.diff.std == pytest.approx(t.diff.std / math.sqrt(3))  # the standard error


def test_when_the_problems_agree_it_is_the_t_over_the_warm_up_models_means():
    # every problem's difference is the same under a warm-up model and seed: MS_problem = MS_wxp = 0
    d = np.array([[[0.3] * 4, [0.1] * 4], [[-0.1] * 4, [0.0] * 4], [[0.2] * 4, [0.2] * 4]])
    found = nested_difference(d, np.zeros_like(d))
    t = paired_difference(d.mean(axis=(1, 2)), np.zeros(3))
    assert (found.diff.mean, found.diff.low, found.diff.high, found.p_value) == pytest.approx((t.diff.mean, t.diff.low, t.diff.high, t.p_value))


def test_a_stack_is_each_table_s_nested_difference_and_a_flat_one_has_no_spread():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(4, 2, 3, 5)), rng.normal(size=(4, 2, 3, 5))
    a[1], b[1] = 0.25, 0.0
    found = nested_differences(a, b)
    for i in range(4):
        one = nested_difference(a[i], b[i])
        assert (found.mean[i], found.se[i], found.low[i], found.high[i], found.p[i]) == pytest.approx(
            (one.diff.mean, one.diff.std, one.diff.low, one.diff.high, one.p_value))
    assert (found.p[1], found.low[1], found.high[1]) == pytest.approx((0.0, 0.25, 0.25))
    same = nested_difference(np.ones((2, 2, 3)), np.ones((2, 2, 3)))
    assert (same.diff.low, same.diff.high, same.p_value) == (0.0, 0.0, 1.0)


def test_one_warm_up_model_s_components_are_the_two_way_analysis_s():
    rng = np.random.default_rng(3)
    table = rng.normal(size=(4, 6))
    two_way = crossed.variance_components(table)
    one = variance_components(table[None])
    assert math.isnan(one.warmup) and math.isnan(one.warmup_x_problem)
    assert (one.seed, one.problem, one.residual) == pytest.approx((two_way.seed, two_way.problem, two_way.seed_x_problem))


def test_components_the_design_cannot_estimate_are_nan():
    one_seed = variance_components(np.arange(12.0).reshape(3, 1, 4))  # one seed per warm-up model: seeds not separable
    assert math.isnan(one_seed.seed) and math.isnan(one_seed.residual) and math.isnan(one_seed.warmup)
    assert not math.isnan(one_seed.problem)
    # without per-problem results: warm-up means 0.15, 0.4; MS_warmup = 2 * 2 * 0.125^2 = 0.0625, MS_seed = the spread
    # within the warm-up models, (0.05^2 * 2 + 0.1^2 * 2) / 2 = 0.0125; warm-up = (0.0625 - 0.0125) / 2 = 0.025
    runs = variance_components(np.array([[[0.1], [0.2]], [[0.3], [0.5]]]))
    assert (runs.warmup, runs.seed) == pytest.approx((0.025, 0.0125))
    assert math.isnan(runs.problem) and math.isnan(runs.warmup_x_problem) and math.isnan(runs.residual)


def test_refuses_one_warm_up_model_and_mismatched_shapes():
    with pytest.raises(ValueError, match=">= 2 warm-ups"):
        nested_difference(np.ones((1, 2, 3)), np.ones((1, 2, 3)))
    with pytest.raises(ValueError, match="one shape"):
        nested_difference(np.ones((2, 2, 3)), np.ones((2, 2, 4)))
    with pytest.raises(ValueError, match="pairs, warm-ups, seeds, problems"):
        nested_differences(np.ones((2, 2, 3)), np.ones((2, 2, 3)))
    with pytest.raises(ValueError, match=r"\[warm-ups, seeds, problems\]"):
        mean_squares(np.ones((2, 3)))
