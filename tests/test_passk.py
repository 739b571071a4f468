"""The unbiased pass@k estimator against hand-computed values and its edge cases."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from tsctl.algo.passk import mean_pass_at_k, pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2) = 0.7
        (5, 2, 1, 2 / 5),
        (5, 0, 3, 0.0),
        (5, 5, 3, 1.0),
        (4, 2, 3, 1.0),  # n - c < k: every draw of 3 holds a correct sample
        (10, 3, 4, 1 - comb(7, 4) / comb(10, 4)),
        (8, 1, 8, 1.0),
    ],
)
def test_hand_computed_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k)[0] == pytest.approx(expected, abs=1e-12)


def test_vectorised_and_mean() -> None:
    n = np.array([5, 5, 5])
    c = np.array([2, 0, 5])
    assert pass_at_k(n, c, 2) == pytest.approx([0.7, 0.0, 1.0])
    assert mean_pass_at_k(n, c, 2) == pytest.approx(1.7 / 3)
    assert mean_pass_at_k([5, 5], [2, 2], 1) == pytest.approx(0.4)


def test_large_n_is_stable() -> None:
    """C(1000, 500) overflows a float; the product form stays exact enough."""
    value = pass_at_k(1000, 1, 500)[0]
    assert value == pytest.approx(0.5)
    assert 0.0 <= pass_at_k(1000, 3, 999)[0] <= 1.0


def test_pass_at_1_is_the_sample_mean() -> None:
    rng = np.random.default_rng(0)
    n = np.full(50, 16)
    c = rng.integers(0, 17, size=50)
    assert mean_pass_at_k(n, c, 1) == pytest.approx((c / n).mean())


def test_invalid_counts_are_rejected() -> None:
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k([4, 2], [1, 1], 3)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k([4], [5], 1)
    with pytest.raises(ValueError, match="same shape"):
        pass_at_k([4, 4], [1], 1)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k([4], [1], 0)


def test_no_problems_gives_nan() -> None:
    assert np.isnan(mean_pass_at_k([], [], 1))
