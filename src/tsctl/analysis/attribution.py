"""The report's "where did the gain come from" section: seeded samples split by source, arm, age and prefix length.

Per run, the per-step ``seeds/by_<split>/<value>/{accuracy,advantage,samples}`` metrics
(:mod:`tsctl.seeds.attribution`) are pooled over all training steps, weighted by the step's
samples: accuracy and advantage of every seeded sample of that split value, and its share of the
split's seeded samples. A point's cell is the mean ± std [t-interval] of those per-run values over
its runs. A positive advantage means those seeded samples beat the other samples of their groups
(every group's advantages average 0). Points without seeds (``ratio=0``) have no rows.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from tsctl.analysis.points import Point, Run, sort_key
from tsctl.analysis.stats import LEVEL, Interval, mean_ci

SPLITS = {
    "by_source": "source",
    "by_arm": "selector arm (windows old)",
    "by_age": "behaviour age (steps)",
    "by_prefix": "prefix length (tokens)",
}
"""Splits in table order, with their titles."""


@dataclass
class AttributionRow:
    """One split value of one point: its share of the seeded samples, their accuracy and advantage, over runs."""

    point: Point
    split: str
    value: str
    share: Interval
    accuracy: Interval
    advantage: Interval


def value_order(value: str) -> tuple[float, str]:
    """Bins (``0``, ``2-3``) and arms by their first number; names (``self``) after them."""
    return sort_key(value.split("-")[0])


def run_attribution(run: Run) -> dict[tuple[str, str], tuple[float, float, float]]:
    """``{(split, value): (share of the split's seeded samples, accuracy, advantage)}`` over the run's training steps."""
    sums: dict[tuple[str, str], list[float]] = {}
    for record in run.train_records:
        for key, count in record.items():
            parts = key.split("/")
            if len(parts) == 4 and parts[0] == "seeds" and parts[1] in SPLITS and parts[3] == "samples" and count:
                stem = "/".join(parts[:3])
                acc = sums.setdefault((parts[1], parts[2]), [0.0, 0.0, 0.0])
                acc[0] += count
                acc[1] += count * record[f"{stem}/accuracy"]
                acc[2] += count * record[f"{stem}/advantage"]
    totals: dict[str, float] = {}
    for (split, _), (n, _, _) in sums.items():
        totals[split] = totals.get(split, 0.0) + n
    return {key: (n / totals[key[0]], acc / n, adv / n) for key, (n, acc, adv) in sums.items()}


def attribution_rows(points: list[Point], level: float = LEVEL) -> list[AttributionRow]:
    """Rows by point, then split (``SPLITS`` order), then value."""
    rows = []
    for point in points:
        per_run = [run_attribution(run) for run in point.used]
        keys = {k for r in per_run for k in r}
        for split in SPLITS:
            for value in sorted((v for s, v in keys if s == split), key=value_order):
                got = [r[(split, value)] for r in per_run if (split, value) in r]
                share, acc, adv = ([g[i] for g in got] for i in range(3))
                rows.append(AttributionRow(point, split, value, mean_ci(share, level), mean_ci(acc, level), mean_ci(adv, level)))
    return rows


NOTES = (
    "Seeded samples of every training step, pooled per run and split: their share of the split's seeded samples, "
    "their accuracy (share solved) and their mean advantage (> 0: they beat the other samples of their groups, whose "
    "advantages average 0). Cells are mean ± std [{level} t-interval] over seeds. Arm = age of the behaviour snapshot "
    "in refresh windows when the window opened (0 = the latest, the paper's choice); age = steps since the snapshot "
    "(or, for another model or traces, since the window's seeds were written); prefix length in tokens (0 = a seed cut at 0)."
)


def markdown_section(rows: list[AttributionRow], level: float) -> str:
    """The section as Markdown (empty without seeded samples)."""
    from tsctl.analysis.tables import fmt

    if not rows:
        return ""
    lines = ["## Seeded samples by source, arm, age and prefix length", "", "| point | split | value | share of seeded | accuracy | advantage |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.point.label} | {SPLITS[r.split]} | {r.value} | {fmt(r.share)} | {fmt(r.accuracy)} | {fmt(r.advantage)} |" for r in rows]
    return "\n".join([*lines, "", NOTES.format(level=f"{level:.0%}"), ""]) + "\n"


def attribution_csv(rows: list[AttributionRow]) -> str:
    """The section as CSV: one row per point, split and value; ``<stat>_{mean,std,ci_low,ci_high,n}``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    stats = ("mean", "std", "ci_low", "ci_high", "n")
    writer.writerow(["point", "split", "value", *(f"{m}_{s}" for m in ("share", "accuracy", "advantage") for s in stats)])
    for r in rows:
        cells = ["" if math.isnan(x) else f"{x:.6g}" for c in (r.share, r.accuracy, r.advantage) for x in (c.mean, c.std, c.low, c.high, c.n)]
        writer.writerow([r.point.label, r.split, r.value, *cells])
    return buffer.getvalue()
