"""Holm's step-down correction within a family of comparisons, against hand-computed values and the step-down
procedure itself; and a report's verdicts taken from the adjusted p."""

import math

import numpy as np
import pytest

from tsctl.analysis.compare import Row, adjusted
from tsctl.analysis.families import holm
from tsctl.analysis.points import Point
from tsctl.analysis.stats import Comparison, Interval


def test_holm_by_hand():
    # sorted: 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04, lifted to 0.06 by the running maximum)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # the truncation results, 0.035 and 0.016, among 33 comparisons whose other p are 0.2 or more
    adjusted_p = holm([0.035, 0.016] + [0.2 + 0.02 * i for i in range(31)])
    # sorted first, 0.016 is multiplied by 33 (0.528); second, 0.035 by 32 (1.12, capped at 1)
    assert adjusted_p[0] == 1.0 and adjusted_p[1] == pytest.approx(0.528)
    assert holm([0.5]) == [0.5] and holm([]) == []


def test_an_untestable_comparison_stays_nan_and_does_not_count():
    out = holm([0.02, math.nan, 0.01])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)  # m = 2


def test_a_declared_family_with_comparisons_not_yet_run_counts_them_as_p_1():
    # a family of 5 declared, 2 with p-values: as holm([0.01, 0.02, 1, 1, 1]) -> 0.01 x 5 = 0.05, 0.02 x 4 = 0.08
    assert holm([0.02, 0.01], size=5) == pytest.approx([0.08, 0.05])
    assert holm([0.02, 0.01], size=5) == pytest.approx(holm([0.02, 0.01, 1.0, 1.0, 1.0])[:2])
    assert holm([0.02, 0.01], size=1) == holm([0.02, 0.01])  # never fewer than those tested


def step_down(p: list[float], alpha: float) -> list[bool]:
    """Holm's procedure as first written: reject the smallest p while p_(i) <= alpha / (m - i + 1), stop at the first that is not."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    rejected = [False] * len(p)
    for rank, i in enumerate(order):
        if p[i] > alpha / (len(p) - rank):
            break
        rejected[i] = True
    return rejected


def test_holm_adjusted_p_rejects_exactly_what_the_step_down_procedure_rejects():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = list(rng.uniform(0, 0.1, rng.integers(1, 12)) ** 2)
        for alpha in (0.01, 0.05, 0.1):
            assert [q <= alpha for q in holm(p)] == step_down(p, alpha)


def row(metric: str, mean: float, p: float) -> Row:
    point, base = Point("ratio=25", {"ratio": "25"}, [], []), Point("ratio=0", {"ratio": "0"}, [], [])
    by_seed = Comparison(Interval(mean, 0.01, 5, mean - 0.01, mean + 0.01), p, "paired t")
    return Row(point, base, metric, ["0", "1", "2", "3", "4"], 0.5 + mean, 0.5, by_seed, None, 0.02)


def test_a_table_s_verdicts_come_from_its_holm_adjusted_p():
    # raw p 0.016 and 0.035 are below 0.05; among three comparisons they adjust to 0.048 and 0.07
    rows = adjusted([row("pass@1", 0.02, 0.016), row("pass@8", 0.03, 0.035), row("entropy/plain", 0.001, 0.6)], 0.05)
    assert [r.p_holm for r in rows] == pytest.approx([0.048, 0.07, 0.6])
    assert [r.verdict for r in rows] == ["better", "not distinguishable", "not distinguishable"]
    assert rows[1].by_seed.p_value == 0.035  # the raw p is kept beside the adjusted one
