"""Confidence intervals, paired tests and verdicts against hand-computed values."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from tsctl.analysis.stats import BETTER, SAME, WORSE, Comparison, Interval, mean_ci, paired_difference, t_quantile, t_two_sided_p, verdict


def test_mean_ci_matches_the_t_interval_by_hand():
    # values 1..5: mean 3, sample std sqrt(2.5), t_{4, 0.975} = 2.7764451052
    ci = mean_ci([1, 2, 3, 4, 5])
    half = 2.7764451052 * math.sqrt(2.5) / math.sqrt(5)
    assert ci.mean == 3 and ci.n == 5
    assert ci.std == pytest.approx(math.sqrt(2.5), abs=1e-12)
    assert (ci.low, ci.high) == pytest.approx((3 - half, 3 + half), abs=1e-9)
    assert ci.half_width == pytest.approx(1.9632432, abs=1e-6)


def test_mean_ci_level_widens_the_interval_and_one_value_has_none():
    assert mean_ci([1, 2, 4], level=0.99).half_width > mean_ci([1, 2, 4], level=0.9).half_width
    single = mean_ci([0.4])
    assert single.mean == 0.4 and single.std == 0 and math.isnan(single.low) and math.isnan(single.high)
    with pytest.raises(ValueError, match="at least one"):
        mean_ci([])
    with pytest.raises(ValueError, match="level"):
        mean_ci([1, 2], level=95)


def test_paired_difference_by_hand():
    setting, baseline = [0.40, 0.42, 0.45], [0.38, 0.41, 0.40]
    # differences 0.02, 0.01, 0.05: mean 0.0266667, std sqrt(0.000433333) = 0.0208167
    c = paired_difference(setting, baseline)
    half = 4.302652730 * 0.0208166600 / math.sqrt(3)
    assert c.diff.mean == pytest.approx(0.0266666667, abs=1e-9)
    assert c.diff.std == pytest.approx(0.0208166600, abs=1e-9)
    assert (c.diff.low, c.diff.high) == pytest.approx((0.0266666667 - half, 0.0266666667 + half), abs=1e-8)
    # t = mean / (std / sqrt(3)) = 2.2188007849; two-sided p with 2 degrees of freedom
    t = 0.0266666667 / (0.0208166600 / math.sqrt(3))
    assert c.p_value == pytest.approx(2 * scipy_stats.t.sf(t, 2), rel=1e-6)
    assert c.p_value == pytest.approx(0.1567260, abs=1e-6)
    assert c.method == "paired t"
    # the interval agrees with scipy's own paired test
    ref = scipy_stats.ttest_rel(setting, baseline).confidence_interval()
    assert (c.diff.low, c.diff.high) == pytest.approx((ref.low, ref.high), abs=1e-9)


def test_pairing_removes_the_shared_seed_spread():
    # seeds differ a lot, the setting is always 0.01 above its own seed's baseline (plus a little noise)
    baseline = [0.30, 0.45, 0.60, 0.38]
    setting = [0.312, 0.459, 0.611, 0.389]
    paired = paired_difference(setting, baseline)
    unpaired = scipy_stats.ttest_ind(setting, baseline)
    assert paired.p_value < 0.01 < unpaired.pvalue
    assert verdict(paired) == BETTER


def test_constant_differences_are_exact():
    c = paired_difference([0.5, 0.6, 0.7], [0.4, 0.5, 0.6])
    assert (c.diff.low, c.diff.high, c.p_value) == pytest.approx((0.1, 0.1, 0.0))
    zero = paired_difference([0.5, 0.6], [0.5, 0.6])
    assert zero.p_value == 1.0 and verdict(zero) == SAME
    with pytest.raises(ValueError, match="equal"):
        paired_difference([1, 2], [1])


def _comparison(low: float, high: float) -> Comparison:
    return Comparison(Interval((low + high) / 2, 0.1, 3, low, high), 0.5, "paired t")


def test_verdict_flips_where_the_interval_crosses_zero():
    assert verdict(_comparison(0.001, 0.2)) == BETTER
    assert verdict(_comparison(0.0, 0.2)) == SAME
    assert verdict(_comparison(-0.001, 0.2)) == SAME
    assert verdict(_comparison(-0.2, -0.001)) == WORSE
    assert verdict(_comparison(-0.2, -0.001), higher_is_better=False) == BETTER
    assert verdict(_comparison(0.01, 0.2), higher_is_better=None) == "higher"
    assert verdict(_comparison(-0.2, -0.01), higher_is_better=None) == "lower"
    assert verdict(_comparison(math.nan, math.nan)) == SAME


def test_verdict_flips_with_the_data():
    # differences d + shift: the lower end of the t-interval crosses 0 between two shifts
    base = np.array([0.0, 0.0, 0.0, 0.0])
    noise = np.array([-0.02, 0.01, 0.02, -0.01])
    half = scipy_stats.t.ppf(0.975, 3) * noise.std(ddof=1) / 2
    assert verdict(paired_difference(base + noise + half * 1.01, base)) == BETTER
    assert verdict(paired_difference(base + noise + half * 0.99, base)) == SAME
    assert verdict(paired_difference(base + noise - half * 1.01, base)) == WORSE


def test_equivalence_p_is_two_one_sided_t_tests_by_hand():
    from tsctl.analysis.stats import equivalence_p

    baseline = [0.5] * 5
    setting = [0.51, 0.49, 0.50, 0.52, 0.48]
    # differences 0.01, -0.01, 0, 0.02, -0.02: mean 0, std sqrt(0.001 / 4) = 0.0158114, se 0.0070711
    # margin 0.03: t = 0.03 / 0.0070711 = 4.24264 on either side, p = P(T_4 > 4.24264) = 0.0066180
    assert equivalence_p(setting, baseline, 0.03) == pytest.approx(scipy_stats.t.sf(4.2426407, 4), rel=1e-6)
    assert equivalence_p(setting, baseline, 0.03) == pytest.approx(0.0066180, abs=1e-6)
    # it passes at 0.05 exactly when the 90% t-interval, 0 -+ 2.1318468 * 0.0070711 = -+0.0150745, is inside the margin
    assert equivalence_p(setting, baseline, 0.0151) < 0.05 < equivalence_p(setting, baseline, 0.0150)
    assert equivalence_p([0.6, 0.7], [0.5, 0.6], 0.2) == 0.0 and equivalence_p([0.6, 0.7], [0.5, 0.6], 0.05) == 1.0  # no spread
    assert math.isnan(equivalence_p([0.5], [0.5], 0.1))
    with pytest.raises(ValueError, match="positive"):
        equivalence_p(setting, baseline, 0.0)


def test_the_minimum_detectable_effect_has_80_percent_power():
    from scipy import stats

    from tsctl.analysis.power import min_detectable_effect

    # many seeds: the normal approximation (z_0.975 + z_0.8) * s / sqrt(n) = (1.959964 + 0.841621) * 1 / sqrt(1000) = 0.088594
    assert min_detectable_effect(1.0, 1000) == pytest.approx(0.088594, rel=2e-3)
    # 5 seeds: a little above (t_{4, 0.975} + t_{4, 0.8}) * s / sqrt(5) = (2.776445 + 0.940965) / 2.236068 = 1.662472
    mde = min_detectable_effect(1.0, 5)
    assert 1.662472 < mde < 1.662472 * 1.02 and mde == pytest.approx(1.681997, abs=1e-5)
    critical, lam = stats.t.ppf(0.975, 4), mde * math.sqrt(5) / 1.0  # the noncentral t's power at the MDE
    assert stats.nct.sf(critical, 4, lam) + stats.nct.cdf(-critical, 4, lam) == pytest.approx(0.8, abs=1e-9)
    # the power of that design checked by simulation: 5 paired differences ~ N(mde, 1), the two-sided t-test at 0.05
    rng = np.random.default_rng(1)
    d = rng.normal(mde, 1.0, (200000, 5))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(5))
    assert np.mean(np.abs(t) > 2.776445) == pytest.approx(0.8, abs=0.005)
    assert min_detectable_effect(0.01, 5) == pytest.approx(0.01681997, abs=1e-7)  # scales with the spread
    assert min_detectable_effect(0.0, 5) == 0.0 and math.isnan(min_detectable_effect(0.5, 1))
    with pytest.raises(ValueError, match="alpha"):
        min_detectable_effect(1.0, 5, alpha=0.5, power=0.4)


def test_the_t_helpers_are_scipy_s_t_distribution():
    # t_{4, 0.975} = 2.776445 (tables); P(|T_4| >= 2.776445) = 0.05; the paired p-value is scipy's ttest_rel's
    assert t_quantile(0.975, 4) == pytest.approx(2.776445, abs=1e-6) and t_quantile(0.975, 4.3) == scipy_stats.t.ppf(0.975, 4.3)
    assert t_two_sided_p(2.776445, 4) == pytest.approx(0.05, abs=1e-6) and t_two_sided_p(-2.0, 4.3) == 2 * scipy_stats.t.sf(2.0, 4.3)
    setting, baseline = [0.31, 0.35, 0.30, 0.41, 0.33], [0.30, 0.31, 0.29, 0.35, 0.34]
    assert paired_difference(setting, baseline).p_value == pytest.approx(scipy_stats.ttest_rel(setting, baseline).pvalue, rel=1e-12)
