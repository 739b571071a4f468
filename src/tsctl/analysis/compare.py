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
- When the paired runs come from two or more warm-up models (:attr:`~tsctl.analysis.points.Run.warmup`: a sweep over
  ``model.warmup.seed``), runs pair by warm-up model and seed, and the warm-up models are a random unit with the
  seeds nested in them (:mod:`~tsctl.analysis.nested`): the comparison over seeds becomes the paired t over the warm-up
  models' mean differences, the one over problems :func:`~tsctl.analysis.nested.nested_difference`. The design is
  balanced first: a warm-up model with more paired seeds than another contributes its first ``S`` by seed, ``S`` the
  fewest any has. Every row carries the variance components of its difference
  (:func:`~tsctl.analysis.nested.variance_components`).
- The comparisons of one table are one family (:mod:`~tsctl.analysis.families`): the deciding
  p-values are Holm-adjusted together and the verdict follows the adjusted p
  (:func:`~tsctl.analysis.wording.decide`). With an equivalence margin (``report.equivalence_margin``,
  in the held-out metrics' units), each held-out metric's paired differences over seeds are also tested for
  equivalence (TOST), Holm-adjusted the same way.
- Every row carries the minimum detectable effect of the paired t-test over its seeds (over its warm-up models, when
  they are random) at 80% power (:func:`~tsctl.analysis.power.min_detectable_effect`, two-sided at 1 - the confidence
  level).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from omegaconf import OmegaConf

from tsctl.algo.passk import pass_at_k
from tsctl.analysis.crossed import crossed_difference
from tsctl.analysis.families import holm
from tsctl.analysis.nested import Components, nested_difference, variance_components
from tsctl.analysis.points import Point, Run, final_values, higher_is_better, metric_order
from tsctl.analysis.power import min_detectable_effect
from tsctl.analysis.stats import LEVEL, Comparison, Interval, equivalence_p, mean_ci, paired_difference
from tsctl.analysis.wording import decide

BY_WARMUP = "paired t over warm-up models"
"""The method of a row's comparison over seeds when the warm-up models are random: the t over their mean differences."""


@dataclass
class Summary:
    """The summary table: one row per point, ``cells[i][metric]`` the interval over point i's used runs."""

    points: list[Point]
    metrics: list[str]
    cells: list[dict[str, Interval]]
    level: float = LEVEL


def summarize(points: list[Point], level: float = LEVEL) -> Summary:
    """Mean, std and t-interval over each point's used runs of every metric of :func:`final_values`; over the means of
    its warm-up models' runs when they come from two or more (the warm-up model a random unit)."""
    cells, metrics = [], set()
    for point in points:
        values = [(run.warmup, final_values(run)) for run in point.used]
        keys = {k for _, v in values for k in v}
        metrics |= keys
        cells.append({k: mean_ci(_unit_values(values, k), level) for k in keys})
    return Summary(points, sorted(metrics, key=metric_order), cells, level)


def _unit_values(values: list[tuple[Optional[str], dict[str, float]]], key: str) -> list[float]:
    """The runs' values of ``key`` (runs given as (warm-up model, values)), or each warm-up model's mean of them when
    they come from two or more warm-up models."""
    by_warmup: dict[Optional[str], list[float]] = {}
    for warmup, v in values:
        if key in v:
            by_warmup.setdefault(warmup, []).append(v[key])
    if len(by_warmup) > 1:
        return [float(np.mean(x)) for x in by_warmup.values()]
    return [x for group in by_warmup.values() for x in group]


@dataclass
class Row:
    """One metric of one point against its baseline.

    Attributes:
        seeds: the seed of each pair (present and completed in both points), grouped by warm-up model when there are
            several: ``warmups`` x S pairs.
        by_seed: the paired t comparison over those seeds; over the warm-up models' mean differences when ``warmups`` > 1.
        by_problem: the test over seeds and problems, when both points stored per-problem results of 2+ seeds; over
            warm-up models, seeds and problems (:mod:`~tsctl.analysis.nested`) when ``warmups`` > 1.
        p_holm: the deciding p-value (``by_problem``'s when there is one, else ``by_seed``'s), Holm-adjusted
            within the table's family.
        mde: the minimum detectable effect at 80% power of ``by_seed``'s paired t-test.
        p_equivalence, p_equivalence_holm: the TOST p-value over seeds against ``margin``, raw and Holm-adjusted;
            None without a margin.
        margin: the equivalence margin, None when none was given or the metric has no better direction.
        verdict: better / worse / not distinguishable (higher / lower for metrics without a direction;
            ``equivalent within ±margin`` when the equivalence test passes), from ``p_holm``.
        warmups: how many warm-up models the pairs come from (1: the warm-up model is fixed).
        problems: the held-out problems of ``by_problem`` (0 without it).
        components: the variance components of the deciding test's table of differences.
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
    warmups: int = 1
    problems: int = 0
    components: Optional[Components] = None

    @property
    def decided(self) -> Comparison:
        """The comparison whose interval and p-value decide: by problem when there is one, else by seed."""
        return self.by_problem or self.by_seed

    @property
    def how(self) -> str:
        """Which test decides, as the tables say it: ``seeds and problems``, ``warm-ups, seeds and problems``,
        ``<n> seeds`` or ``<W> warm-up models``."""
        if self.by_problem:
            return self.by_problem.method
        return f"{self.warmups} warm-up models" if self.warmups > 1 else f"{len(self.seeds)} seeds"


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
    """``point`` against ``base`` on each of ``metrics`` both have (``values_of`` a run), paired by warm-up model and
    seed; not yet adjusted (:func:`adjusted` makes a family of them); empty when the two share no completed seed."""
    mine, theirs = _by_unit(point.used), _by_unit(base.used)
    units = sorted(set(mine) & set(theirs), key=lambda unit: (str(unit[0]), str(unit[1])))
    values = {u: values_of(mine[u]) for u in units}
    base_values = {u: values_of(theirs[u]) for u in units}
    rows = []
    for metric in metrics:
        paired = balanced([u for u in units if metric in values[u] and metric in base_values[u]])
        if paired:
            a = np.array([values[u][metric] for u in paired])
            b = np.array([base_values[u][metric] for u in paired])
            tables = _problem_tables(metric, [mine[u] for u in paired], [theirs[u] for u in paired])
            rows.append(_row(point, base, metric, paired, a, b, tables, level, margin))
    return rows


def _row(point: Point, base: Point, metric: str, paired: list[tuple[Optional[str], str]], a: np.ndarray, b: np.ndarray,
         tables: Optional[tuple[np.ndarray, np.ndarray]], level: float, margin: Optional[float]) -> Row:
    """One metric's row from its ``paired`` units (a balanced design, grouped by warm-up model), their values ``a``,
    ``b`` [pairs] and, when every run has them, their per-problem scores ``tables`` [pairs, P] each."""
    warmups = len({w for w, _ in paired})
    units_a, units_b = (a.reshape(warmups, -1).mean(axis=1), b.reshape(warmups, -1).mean(axis=1)) if warmups > 1 else (a, b)
    by_seed = paired_difference(units_a, units_b, level)
    by_problem = None
    if warmups > 1:
        by_seed = replace(by_seed, method=BY_WARMUP)
        if tables is not None:
            by_problem = nested_difference(*(t.reshape(warmups, -1, t.shape[1]) for t in tables), level)
    elif tables is not None and len(paired) >= 2:
        by_problem = crossed_difference(*tables, level)
    differences = tables[0] - tables[1] if by_problem is not None else (a - b)[:, None]
    mde = min_detectable_effect(by_seed.diff.std, by_seed.diff.n, 1 - level)
    tested = margin if margin is not None and higher_is_better(metric) is not None else None
    equivalence = equivalence_p(units_a, units_b, tested) if tested is not None else None
    return Row(point, base, metric, [s for _, s in paired], float(np.mean(a)), float(np.mean(b)), by_seed, by_problem, mde,
               p_equivalence=equivalence, margin=tested, warmups=warmups, problems=differences.shape[1] if by_problem is not None else 0,
               components=variance_components(differences.reshape(warmups, -1, differences.shape[1])))


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


def _by_unit(runs: list[Run]) -> dict[tuple[Optional[str], str], Run]:
    """Runs keyed by warm-up model and seed (runs without a seed are left out)."""
    return {(r.warmup, r.seed): r for r in runs if r.seed is not None}


def balanced(units: list[tuple[Optional[str], str]]) -> list[tuple[Optional[str], str]]:
    """``units`` (warm-up model, seed), in order, as a balanced design: grouped by warm-up model, each with its first
    ``S`` units, ``S`` the fewest any warm-up model has."""
    by_warmup: dict[Optional[str], list[tuple[Optional[str], str]]] = {}
    for unit in units:
        by_warmup.setdefault(unit[0], []).append(unit)
    fewest = min((len(group) for group in by_warmup.values()), default=0)
    return [unit for group in by_warmup.values() for unit in group[:fewest]]


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


def _problem_tables(metric: str, runs: list[Run], base: list[Run]) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """The per-problem scores [pairs, P] of ``runs`` and of their paired ``base`` runs, when every one scored the same
    problems; None otherwise."""
    mine = [problem_scores(r, metric) for r in runs]
    theirs = [problem_scores(r, metric) for r in base]
    scored = mine + theirs
    if any(s is None for s in scored) or len({tuple(s[0]) for s in scored}) != 1:
        return None
    return np.stack([s[1] for s in mine]), np.stack([s[1] for s in theirs])
