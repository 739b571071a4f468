"""The statistics of a report: per-point intervals over seeds and paired comparisons with a baseline.

- Every summary cell is a :class:`~tsctl.analysis.stats.Interval`: mean, sample std and the 95% Student-t
  interval over the point's completed seeds.
- A *baseline* is a partial setting such as ``ratio=0``. Each other point is compared with the point
  that has its settings except for the baseline's keys (``ratio=25 refresh=5`` against
  ``ratio=0 refresh=5``). The default baseline is the first value of the first swept key, as the
  sweep's command line gave it (``multirun.yaml``), else the first point.
- A comparison pairs runs by seed (the same seed draws the same prompts): the mean difference, its
  t-interval and the paired t-test's p-value. For held-out greedy accuracy and pass@k, when every
  paired run stored per-problem results of the same problems (``final_eval.json``'s
  ``per_problem``; pass@k per problem by the unbiased estimator), a test with seeds and problems as
  crossed random effects (:func:`~tsctl.analysis.crossed.crossed_difference`) gives a second interval
  and p-value, which then decide: it also covers the sampling of the held-out problems, and counts the
  seed-by-problem noise once (its false-positive rate under simulated nulls is checked in
  ``tests/test_report_calibration.py``).
- The comparisons of one table are one family (:mod:`~tsctl.analysis.families`): the deciding
  p-values are Holm-adjusted together and the verdict follows the adjusted p
  (:func:`~tsctl.analysis.wording.decide`). With an equivalence margin (``report.equivalence_margin``,
  in the held-out metrics' units), each held-out metric's paired differences over seeds are also tested for
  equivalence (TOST), Holm-adjusted the same way.
- Every row carries the minimum detectable effect of the paired t-test over its seeds at 80% power
  (:func:`~tsctl.analysis.power.min_detectable_effect`, two-sided at 1 - the confidence level).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from omegaconf import OmegaConf

from tsctl.algo.passk import pass_at_k
from tsctl.analysis.crossed import METHOD, crossed_difference
from tsctl.analysis.families import holm
from tsctl.analysis.points import Point, Run, final_values, higher_is_better, metric_order
from tsctl.analysis.power import min_detectable_effect
from tsctl.analysis.stats import LEVEL, Comparison, Interval, equivalence_p, mean_ci, paired_difference
from tsctl.analysis.wording import decide


@dataclass
class Summary:
    """The summary table: one row per point, ``cells[i][metric]`` the interval over point i's used runs."""

    points: list[Point]
    metrics: list[str]
    cells: list[dict[str, Interval]]
    level: float = LEVEL


def summarize(points: list[Point], level: float = LEVEL) -> Summary:
    """Mean, std and t-interval over each point's used runs of every metric of :func:`final_values`."""
    cells, metrics = [], set()
    for point in points:
        values = [final_values(run) for run in point.used]
        keys = {k for v in values for k in v}
        metrics |= keys
        cells.append({k: mean_ci([v[k] for v in values if k in v], level) for k in keys})
    return Summary(points, sorted(metrics, key=metric_order), cells, level)


@dataclass
class Row:
    """One metric of one point against its baseline.

    Attributes:
        seeds: the seeds paired (present and completed in both points).
        by_seed: the paired t comparison over those seeds.
        by_problem: the test over seeds and problems, when both points stored per-problem results of 2+ seeds.
        p_holm: the deciding p-value (``by_problem``'s when there is one, else ``by_seed``'s), Holm-adjusted
            within the table's family.
        mde: the minimum detectable effect at 80% power of the paired t-test over ``seeds``.
        p_equivalence, p_equivalence_holm: the TOST p-value over seeds against ``margin``, raw and Holm-adjusted;
            None without a margin.
        margin: the equivalence margin, None when none was given or the metric has no better direction.
        verdict: better / worse / not distinguishable (higher / lower for metrics without a direction;
            ``equivalent within ±margin`` when the equivalence test passes), from ``p_holm``.
    """

    point: Point
    baseline: Point
    metric: str
    seeds: list[str]
    setting_mean: float
    baseline_mean: float
    by_seed: Comparison
    by_problem: Optional[Comparison]
    mde: float
    p_holm: float = float("nan")
    p_equivalence: Optional[float] = None
    p_equivalence_holm: Optional[float] = None
    margin: Optional[float] = None
    verdict: str = ""

    @property
    def decided(self) -> Comparison:
        """The comparison whose interval and p-value decide: by problem when there is one, else by seed."""
        return self.by_problem or self.by_seed

    @property
    def how(self) -> str:
        """Which test decides, as the tables say it: ``seeds and problems`` or ``<n> seeds``."""
        return METHOD if self.by_problem else f"{len(self.seeds)} seeds"


def parse_baseline(text: str) -> dict[str, str]:
    """``"ratio=0"`` or ``"ratio=0 truncation=fixed"`` as ``{key: value}``.

    Raises:
        ValueError: a part is not ``key=value``.
    """
    pairs = {}
    for part in text.split():
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"baseline {text!r}: write it as key=value, e.g. report.baseline=ratio=0")
        pairs[key] = value
    if not pairs:
        raise ValueError("the baseline is empty; write it as key=value, e.g. report.baseline=ratio=0")
    return pairs


def default_baseline(sweep: Path, points: list[Point]) -> Optional[dict[str, str]]:
    """The first value of the first swept key (from the sweep's ``multirun.yaml``), else the first point's value of the first varying key."""
    if len(points) < 2:
        return None
    saved = sweep / "multirun.yaml"
    if saved.is_file():
        from hydra.core.override_parser.overrides_parser import OverridesParser

        task = OmegaConf.load(saved).get("hydra", {}).get("overrides", {}).get("task", [])
        parsed = OverridesParser.create().parse_overrides([str(o) for o in task if not str(o).startswith("hydra")])
        for override in parsed:
            key = override.key_or_group
            if override.is_sweep_override() and key != "seed" and key in points[0].settings:
                return {key: next(iter(override.sweep_string_iterator()))}
    key = next(iter(points[0].settings), None)
    return {key: points[0].settings[key]} if key else None


def baseline_of(point: Point, points: list[Point], baseline: dict[str, str]) -> Optional[Point]:
    """The point with ``point``'s settings except the baseline's keys; None when ``point`` is a baseline or has none."""
    if all(point.settings.get(k) == v for k, v in baseline.items()):
        return None
    wanted = {**point.settings, **baseline}
    return next((p for p in points if p.settings == wanted), None)


def compare(summary: Summary, baseline: dict[str, str], margin: Optional[float] = None) -> list[Row]:
    """Every metric of every non-baseline point against its baseline point, one Holm family, with an
    equivalence test of the held-out metrics against ``margin`` when given (see the module docstring)."""
    rows = []
    for point in summary.points:
        base = baseline_of(point, summary.points, baseline)
        if base is not None:
            rows += paired_rows(point, base, summary.metrics, summary.level, margin)
    return adjusted(rows, 1 - summary.level)


def paired_rows(point: Point, base: Point, metrics: list[str], level: float = LEVEL, margin: Optional[float] = None,
                values_of: Callable[[Run], dict[str, float]] = final_values) -> list[Row]:
    """``point`` against ``base`` on each of ``metrics`` both have (``values_of`` a run), paired by seed; not yet adjusted
    (:func:`adjusted` makes a family of them); empty when the two share no completed seed."""
    mine, theirs = _by_seed(point.used), _by_seed(base.used)
    seeds = sorted(set(mine) & set(theirs), key=str)
    values = {s: values_of(mine[s]) for s in seeds}
    base_values = {s: values_of(theirs[s]) for s in seeds}
    rows = []
    for metric in metrics:
        paired = [s for s in seeds if metric in values[s] and metric in base_values[s]]
        if not paired:
            continue
        a = [values[s][metric] for s in paired]
        b = [base_values[s][metric] for s in paired]
        by_seed = paired_difference(a, b, level)
        by_problem = _per_problem(metric, [mine[s] for s in paired], [theirs[s] for s in paired], level)
        mde = min_detectable_effect(by_seed.diff.std, by_seed.diff.n, 1 - level)
        tested = margin if margin is not None and higher_is_better(metric) is not None else None
        equivalence = equivalence_p(a, b, tested) if tested is not None else None
        rows.append(Row(point, base, metric, paired, float(np.mean(a)), float(np.mean(b)), by_seed, by_problem, mde,
                        p_equivalence=equivalence, margin=tested))
    return rows


def adjusted(rows: list[Row], alpha: float, size: int = 0) -> list[Row]:
    """``rows`` as one family: their deciding and equivalence p-values Holm-adjusted, and their verdicts. ``size``: the
    family's declared size, when some of its comparisons have no rows yet (:func:`~tsctl.analysis.families.holm`)."""
    p_holm = holm([r.decided.p_value for r in rows], size)
    tested = [i for i, r in enumerate(rows) if r.p_equivalence is not None]
    equal_holm = dict(zip(tested, holm([rows[i].p_equivalence for i in tested], size)))
    out = []
    for i, (r, p) in enumerate(zip(rows, p_holm)):
        said = decide(r.decided.diff.mean, p, alpha, higher_is_better(r.metric), equal_holm.get(i), r.margin)
        out.append(replace(r, p_holm=p, p_equivalence_holm=equal_holm.get(i), verdict=said))
    return out


def _by_seed(runs: list[Run]) -> dict[str, Run]:
    """Runs keyed by seed (runs without a seed are left out)."""
    return {r.seed: r for r in runs if r.seed is not None}


def problem_scores(run: Run, metric: str) -> Optional[tuple[list[str], np.ndarray]]:
    """Problem ids and per-problem scores [P] of ``metric`` from ``final_eval.json``: greedy 0/1, or the unbiased
    pass@k of each problem's solved samples (:func:`~tsctl.algo.passk.pass_at_k`; pass@1 = solved / samples)."""
    table = run.final.get("per_problem") or {}
    if metric == "greedy_accuracy" and "greedy" in table:
        return table["greedy"]["ids"], np.asarray(table["greedy"]["solved"], dtype=np.float64)
    k = int(metric.removeprefix("pass@")) if metric.startswith("pass@") and metric[5:].isdigit() else 0
    if k and "sampled" in table and table["sampled"]["samples"] >= k:
        sampled = table["sampled"]
        solved = np.asarray(sampled["solved"], dtype=np.int64)
        return sampled["ids"], pass_at_k(np.full(solved.shape, sampled["samples"]), solved, k)
    return None


def _per_problem(metric: str, runs: list[Run], base: list[Run], level: float) -> Optional[Comparison]:
    """The test over seeds and problems, when every run scored the same problems and there are two or more seeds."""
    mine = [problem_scores(r, metric) for r in runs]
    theirs = [problem_scores(r, metric) for r in base]
    scored = mine + theirs
    if len(runs) < 2 or any(s is None for s in scored) or len({tuple(s[0]) for s in scored}) != 1:
        return None
    return crossed_difference(np.stack([s[1] for s in mine]), np.stack([s[1] for s in theirs]), level)
