"""The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

With ``n`` samples of a problem of which ``c`` are correct, the probability that at least one of
``k`` samples drawn without replacement is correct is ``1 - C(n - c, k) / C(n, k)``. It is computed
as ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``, which never forms a large binomial coefficient.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def pass_at_k(n: ArrayLike, c: ArrayLike, k: int) -> np.ndarray:
    """Per-problem unbiased pass@k.

    Args:
        n: samples per problem, shape ``(P,)`` (or a scalar).
        c: correct samples per problem, shape ``(P,)``, ``0 <= c <= n``.
        k: samples per attempt, ``1 <= k <= min(n)``.

    Returns:
        float64 array of shape ``(P,)`` with values in [0, 1].

    Raises:
        ValueError: when shapes differ or a count is out of range.
    """
    n_arr = np.atleast_1d(np.asarray(n, dtype=np.int64))
    c_arr = np.atleast_1d(np.asarray(c, dtype=np.int64))
    if n_arr.shape != c_arr.shape:
        raise ValueError(f"n and c must have the same shape, got {n_arr.shape} and {c_arr.shape}")
    if k < 1 or (n_arr < k).any():
        raise ValueError(f"pass@k needs 1 <= k <= n for every problem, got k={k}, min n={n_arr.min(initial=k)}")
    if (c_arr < 0).any() or (c_arr > n_arr).any():
        raise ValueError("every c must satisfy 0 <= c <= n")
    result = np.ones(n_arr.shape, dtype=np.float64)
    for index, (n_i, c_i) in enumerate(zip(n_arr.tolist(), c_arr.tolist())):
        if n_i - c_i >= k:
            result[index] = 1.0 - np.prod(1.0 - k / np.arange(n_i - c_i + 1, n_i + 1, dtype=np.float64))
    return result


def mean_pass_at_k(n: ArrayLike, c: ArrayLike, k: int) -> float:
    """Unbiased pass@k averaged over problems (see :func:`pass_at_k`); NaN for no problems."""
    values = pass_at_k(n, c, k)
    return float(values.mean()) if values.size else float("nan")
