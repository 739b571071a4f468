"""Families of comparisons and Holm's step-down correction within each.

A *family* is the set of comparisons that one table or one claim makes against its baseline:

- the paired-comparison table of a report (and of each section of the results page): every point and
  every metric against the baseline, together (:func:`~tsctl.analysis.compare.compare`);
- each claim of a ratio sweep (:mod:`~tsctl.analysis.claims`): that claim's comparisons, among
  themselves (claim (iii)'s held-out comparisons are also in the table's family, and are adjusted there
  apart).

Holm's correction of ``m`` p-values: sort them, ``p_(1) <= ... <= p_(m)``; the adjusted value of the
i-th is ``max_{j <= i} min(1, (m - j + 1) * p_(j))``. Rejecting where the adjusted p is below alpha keeps
the chance of any false rejection in the family at most alpha, whatever the dependence between tests.
"""

from __future__ import annotations

import math
from typing import Sequence


def holm(p_values: Sequence[float], size: int = 0) -> list[float]:
    """Holm-adjusted ``p_values``, in their order; a NaN (an untestable comparison) stays NaN and does
    not count in ``m``. ``size``: the family's declared size when some of its comparisons have no p-value yet; ``m`` is
    then ``size``, as if each missing one had p = 1 (never smaller than the tested count)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = max(len(tested), size)
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted
