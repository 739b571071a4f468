"""The sections of ``docs/RESULTS.md`` built from arms (:data:`results_spec.SECTIONS`), and the warm-up row
every section shows.

A section's table has a ``warm-up`` row first: the warmed-up model its runs started from, scored with the
final evaluation's code, problems and sampling seeds (:mod:`results_scoring`). Its *primary* comparisons,
declared in :mod:`results_spec` before its runs, are one Holm family and the only ones with verdicts of that
family; the page then shows, each as a family of its own and labelled exploratory: every arm against the
warm-up, and the primary pairs on the other held-out metrics. A comparison primary in one section keeps that
verdict wherever else it is shown (:class:`Decided`). Where a section lists ``trajectory`` arms, every kept
checkpoint of their runs is shown against the step, with the warm-up as step 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from scipy import optimize

from results_scoring import WARMUP, warmup_records
from results_spec import Arm, Section
from tsctl.io.run_records import is_record, restore_record
from tsctl.analysis.compare import Row, adjusted, paired_rows, summarize
from tsctl.analysis.figures import band, figure, half_width, save, styles
from tsctl.analysis.plots import draw_all, plot_passk
from tsctl.analysis.points import TRAINING, Point, Run, final_values, find_runs, header, higher_is_better, training_values
from tsctl.analysis.stats import LEVEL, mean_ci, t_quantile
from tsctl.analysis.tables import bounds_rows, comparison_rows, fmt, md_table, table_rows
from tsctl.analysis.wording import rules_out

HELD_OUT = ("greedy_accuracy", "pass@1", "pass@2", "pass@4", "pass@8")
"""The held-out metrics the comparisons are made on."""

ArmId = tuple[str, str]
"""An arm's identity across sections: its sweep and its point."""


@dataclass
class Decided:
    """The verdicts of the primary comparisons made so far, by (setting arm, baseline arm, metric), with the section
    whose family decided each: one comparison, one verdict, wherever it is shown."""

    rows: dict[tuple[ArmId, ArmId, str], tuple[Row, str]] = field(default_factory=dict)


def arm_id(arm: Arm) -> ArmId:
    return arm.sweep, arm.point


def arm_points(spec: Section, scratch: Path) -> list[Point]:
    """One point per arm, from its sweep's runs restored under ``scratch/results/<sweep>`` (none yet: no runs)."""
    points = []
    for arm in spec.arms:
        try:
            runs = find_runs(scratch / "results" / arm.sweep)
        except FileNotFoundError:
            runs = []
        key, _, value = arm.point.partition("=")
        mine = [r for r in runs if not arm.point or r.settings.get(key) == value]
        points.append(Point(arm.label, {"arm": arm.label}, mine, [r for r in mine if r.status == "completed"]))
    return points


def warmup_point(points: list[Point], figures: Path, scratch: Path) -> Optional[Point]:
    """The warm-up row: the records of the warmed-up model the points' runs started from (None when they started from
    several, from none known, or it has no record)."""
    digests = {r.base_weights for p in points for r in p.used if r.base_weights}
    tasks = {r.settings.get("task", "countdown") for p in points for r in p.used}
    if len(digests) != 1 or len(tasks) != 1:
        return None
    records = warmup_records(figures, tasks.pop(), digests.pop())
    found = sorted(r for r in records.glob("seed=*") if is_record(r)) if records.is_dir() else []
    if not found:
        return None
    folder = scratch / "warmup" / records.name
    for record in found:
        if not (folder / record.name).exists():
            restore_record(record, folder / record.name)
    runs = find_runs(folder)
    return Point(WARMUP, {"arm": WARMUP}, runs, runs)


def no_warmup_lines(points: list[Point], sweeps: list[str]) -> list[str]:
    """Why a section built from ``points`` (of the sweeps ``sweeps``) has no warm-up row (:func:`warmup_point` gave None)."""
    digests = sorted({r.base_weights for p in points for r in p.used if r.base_weights})
    if not digests:
        line = "Its runs did not record the weights of the warm-up model they started from, so it has no warm-up row."
    elif len(digests) > 1:
        line = f"Its runs started from {len(digests)} warm-up models ({', '.join(digests)}), so it has no one warm-up row."
    else:
        line = (f"The warm-up model its runs started from (weights {digests[0]}) has no scored record in `docs/results/warmup/`, "
                f"so it has no warm-up row: `python scripts/results.py --score-only --only {' '.join(sweeps)}` scores it on a "
                "machine whose warm-up gives those weights, or with `--warmup-model` and a folder of them.")
    return [line, ""]


def trained_again_lines(again: tuple[Section, list[str]]) -> list[str]:
    """Where a section's points are trained again: ``again`` is the section and the labels of its arms that do."""
    section, arms = again
    named = " and ".join([", ".join(arms[:-1]), arms[-1]] if len(arms) > 1 else arms)
    return [f"Section \"{section.title}\" trains {named} again at these settings, in runs of their own from a warm-up "
            "model that is kept and scored: a second sample of these points, each against the model it started from.", ""]


def all_values(run: Run) -> dict[str, float]:
    """A run's final values and those of its whole training (:func:`~tsctl.analysis.points.training_values`)."""
    return final_values(run) | training_values(run)


def family(pairs: list[tuple[Point, Point, str]], level: float = LEVEL, size: int = 0) -> list[Row]:
    """The comparisons ``(setting, baseline, metric)`` as one Holm family; ``size``: its declared size, counting the
    comparisons not yet run as p = 1."""
    rows = [row for setting, base, metric in pairs for row in paired_rows(setting, base, [metric], level, values_of=all_values)]
    return adjusted(rows, 1 - level, size) if rows else []


def quote(row: Row, family: str) -> dict:
    """A comparison as the table of findings quotes it: the labels, both means, the deciding difference with its
    interval, standard error and degrees of freedom (:func:`spread`), the Holm-adjusted p of ``family`` (named),
    the verdict, what the interval rules out and the warm-up models its runs started from."""
    c = row.decided
    se, df = spread(row)
    started = sorted({r.base_weights for r in [*row.point.used, *row.baseline.used] if r.base_weights})
    return {"setting": row.point.label, "baseline": row.baseline.label, "metric": row.metric, "seeds": len(row.seeds),
            "setting_mean": row.setting_mean, "baseline_mean": row.baseline_mean, "difference": c.diff.mean, "low": c.diff.low,
            "high": c.diff.high, "se": se, "df": df, "how": row.how, "p_holm": row.p_holm, "verdict": row.verdict,
            "family": family, "rules_out": rules_out(c.diff.low, c.diff.high, higher_is_better(row.metric)), "warmup": started}


def spread(row: Row) -> tuple[float, float]:
    """The standard error of ``row``'s deciding difference and the degrees of freedom of its t-interval (NaN, NaN without
    an interval). By seed (a paired t over ``n`` units) they are ``std / sqrt(n)`` and ``n - 1``; over seeds and problems
    the interval's ``std`` is its standard error (the test over problems gives it so) and the degrees of freedom
    (Satterthwaite's) are those at which ``mean -+ t * se`` gives the interval's ends."""
    c = row.decided
    n, half = c.diff.n, c.diff.half_width
    if math.isnan(half) or n < 2:
        return math.nan, math.nan
    if row.by_problem is None:
        return c.diff.std / math.sqrt(n), float(n - 1)
    se = c.diff.std
    if se == 0 or half <= se * t_quantile(0.5 + LEVEL / 2, 1e9):  # no spread, or the normal limit
        return se, math.inf
    return se, float(optimize.brentq(lambda df: t_quantile(0.5 + LEVEL / 2, df) - half / se, 1e-3, 1e9))


def family_lines(title: str, rows: list[Row]) -> list[str]:
    """A family's comparison table and what each comparison rules out, under ``title``."""
    if not rows:
        return []
    return [title, "", *md_table(*comparison_rows(rows)), "", "What each rules out:", "", *md_table(*bounds_rows(rows)), ""]


def seeds_text(n: int) -> str:
    """``1 seed``, ``5 seeds``."""
    return f"{n} seed{'' if n == 1 else 's'}"


def untested(n: int) -> str:
    """The verdict cell of a comparison of ``n`` paired seeds too few for a test."""
    return f"untested: {seeds_text(n)} so far"


def gains_lines(spec: Section, rows: list[Row], decided: Decided, warm: Optional[Point]) -> list[str]:
    """Each primary pair's difference with its verdict and the family that decided it, beside how far its baseline arm
    fell from the warm-up."""
    head = ["setting", "baseline", "metric", "difference [95% CI]", "Holm p", "verdict", "decided in", "baseline minus warm-up [95% CI]"]
    out = []
    for setting, baseline, row, home in rows_with_homes(spec, rows, decided):
        c = row.decided
        fell = "–"
        if warm is not None:
            drop = paired_rows(row.baseline, warm, [row.metric])
            if drop:
                d = drop[0].decided.diff
                fell = f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
        if math.isnan(row.p_holm):  # too few paired runs for an interval or a test
            out.append([setting, baseline, header(row.metric), f"{c.diff.mean:+.3f} (no interval)", "–", untested(len(row.seeds)), home, fell])
            continue
        out.append([setting, baseline, header(row.metric), f"{c.diff.mean:+.3f} [{c.diff.low:+.3f}, {c.diff.high:+.3f}]",
                    f"{row.p_holm:.3g}", row.verdict, home, fell])
    return md_table(head, out) if out else []


def rows_with_homes(spec: Section, rows: list[Row], decided: Decided) -> list[tuple[str, str, Row, str]]:
    """(setting label, baseline label, row, deciding section) of this section's primary rows, then of the primary rows of
    other sections whose two arms are both arms of this one (under this section's labels)."""
    ids = {arm.label: arm_id(arm) for arm in spec.arms}
    labels = {v: k for k, v in ids.items()}
    mine = [(r.point.label, r.baseline.label, r, "this section") for r in rows]
    shown = {(ids[r.point.label], ids[r.baseline.label], r.metric) for r in rows}
    others = [(labels[key[0]], labels[key[1]], row, home) for key, (row, home) in decided.rows.items()
              if key not in shown and key[0] in labels and key[1] in labels]
    return mine + others


def training_lines(points: list[Point]) -> list[str]:
    """A table of the metrics of the whole training, one row per arm (mean ± std [95% CI] over seeds)."""
    rows = []
    for point in points:
        values = [training_values(run) for run in point.used]
        rows.append([point.label, *(fmt(mean_ci([v[m] for v in values if m in v])) if any(m in v for v in values) else "–" for m in TRAINING)])
    return ["Over the whole training:", "", *md_table(["arm", *map(header, TRAINING)], rows), ""]


def revision_check(folder: Path) -> list[str]:
    """What ``folder/revision_check.json`` records, when the section's arms ran at two code revisions: a point of the older
    one trained again at the newer and compared with its record line by line (timings aside)."""
    check = folder / "revision_check.json"
    if not check.is_file():
        return []
    c = json.loads(check.read_text())
    differing = "; ".join(f"{k} on {n} record(s)" for k, n in sorted(c["differing_fields"].items())) or "none"
    return [f"Two revisions, checked: {c['what']} ({' and '.join(c['revisions'])}, warm-up {' and '.join(sorted(set(c['base_model'])))}): "
            f"{c['records_compared']} records (steps {c['steps'][0]}-{c['steps'][1]}), {c['fields_compared']} fields compared; "
            f"fields that differ: {differing}{' (' + c['note'] + ')' if c.get('note') else ''}.", ""]


def trajectory(points: dict[str, Point], arms: list[Arm], figures: Path) -> dict[str, dict[int, list[dict]]]:
    """``arm label -> step -> [scores of each seed's checkpoint]``, from ``docs/results/<sweep>/trajectory/<point>/``."""
    out: dict[str, dict[int, list[dict]]] = {}
    for arm in arms:
        for run in points[arm.label].used if arm.label in points else []:
            folder = figures / arm.sweep / "trajectory" / run.path.name
            for scored in sorted(folder.glob("step-*.json")) if folder.is_dir() else []:
                data = json.loads(scored.read_text())
                out.setdefault(arm.label, {}).setdefault(int(data["step"]), []).append(data | {"seed": run.seed})
    return out


def trajectory_lines(spec: Section, points: dict[str, Point], warm: Optional[Point], figures: Path, target: Path, metric: str = "pass@8") -> list[str]:
    """The trajectory table and plot: ``metric`` of every kept checkpoint against the step, the warm-up as step 0."""
    arms = [a for a in spec.arms if a.label in spec.trajectory]
    scores = trajectory(points, arms, figures)
    if not scores:
        return []
    steps = sorted({s for by_step in scores.values() for s in by_step})
    start = [r.final[metric] for r in warm.used if metric in r.final] if warm else []
    head = ["step", *(f"{label}: {header(metric)}" for label in scores)]
    rows = [["0 (warm-up)", *([fmt(mean_ci(start))] * len(scores))]] if start else []
    rows += [[str(step), *(fmt(mean_ci([d[metric] for d in by_step.get(step, [])])) if by_step.get(step) else "–" for by_step in scores.values())]
             for step in steps]
    fig, (ax,) = figure(1)
    shown = [points[label] for label in scores]
    for (label, by_step), style in zip(scores.items(), styles(len(scores))):
        x = np.array([0, *steps]) if start else np.array(steps)
        values = ([start] if start else []) + [[d[metric] for d in by_step.get(s, [])] for s in steps]
        mean = np.array([np.mean(v) if v else np.nan for v in values])
        band(ax, x, mean, np.array([half_width(v) for v in values]), len(points[label].used), style)
    if start:
        ax.axhline(float(np.mean(start)), color="grey", ls="--", lw=1.5, label=WARMUP)
        ax.text(steps[-1], float(np.mean(start)), f" {WARMUP}", va="bottom", ha="right", color="grey")
    ax.set(title=f"Held-out {metric} of every kept checkpoint", xlabel="training step", ylabel=f"held-out {metric}")
    path = save(fig, shown, target / f"trajectory_{metric.replace('@', '')}.png")
    lines = [f"Every kept checkpoint of the {', '.join(spec.trajectory)} runs, scored with the final evaluation's problems, "
             f"samples and seed ({header(metric)}, mean ± std [95% CI] over seeds; step 0 is the warm-up's records):", "",
             *md_table(head, rows), ""]
    return lines + [f"![{target.name} trajectory](results/{target.name}/{path.name})", ""]


def arms_section(name: str, spec: Section, figures: Path, scratch: Path, decided: Decided,
                 provenance: Callable[[str, list[Run]], list[str]]) -> tuple[list[str], int, list[dict]]:
    """The page section ``name``, the number of runs it stands on (its arms' sweeps' records restored under
    ``scratch``) and its comparisons as the table of findings quotes them (:func:`quote`); adds its primary verdicts to ``decided``."""
    sweeps = sorted({arm.sweep for arm in spec.arms})
    lines = [f"## {spec.title}", "", f"Asked before its runs: {spec.question}", "",
             f"Its primary comparisons, declared before its runs (one Holm family of {len(spec.primary)}): "
             + "; ".join(f"{p.setting} against {p.baseline} on {p.metric}" for p in spec.primary) + ".", ""]
    points = arm_points(spec, scratch)
    finished = [r for p in points for r in p.used]
    if not finished:
        return lines + [f"Pending: not yet run with records; `python scripts/results.py --only {' '.join(sweeps)}` runs it.", ""], 0, []
    by_label = {p.label: p for p in points if p.used}
    warm = warmup_point(points, figures, scratch)
    summary = summarize(([warm] if warm else []) + [p for p in points if p.used])
    lines += provenance(name, finished) + revision_check(figures / name)
    lines += ["Arms: " + "; ".join(f"{a.label} (`{a.sweep}`{', ' + a.point if a.point else ''})" for a in spec.arms) + ".", ""]
    lines += md_table(*table_rows(summary)) + [""]
    if spec.training:
        lines += training_lines([p for p in points if p.used])
    lines += no_warmup_lines(points, sweeps) if warm is None else []
    pairs = [(by_label[p.setting], by_label[p.baseline], p.metric) for p in spec.primary if p.setting in by_label and p.baseline in by_label]
    primary = family(pairs, size=len(spec.primary))  # Holm over the declared family, the comparisons without runs as p = 1
    ids = {arm.label: arm_id(arm) for arm in spec.arms}
    for row in primary:
        decided.rows[(ids[row.point.label], ids[row.baseline.label], row.metric)] = (row, name)
    pending = f"; Holm over all {len(spec.primary)}, each without runs counted as p = 1" if len(primary) < len(spec.primary) else ""
    lines += family_lines(f"The primary comparisons ({len(primary)} of {len(spec.primary)} with runs so far{pending}):", primary)
    lines += gains_lines(spec, primary, decided, warm) + [""]
    against_warm = family([(p, warm, m) for p in by_label.values() for m in HELD_OUT]) if warm is not None else []
    lines += family_lines("Exploratory: each arm against the warm-up model it started from, on the held-out metrics "
                          "(a Holm family of its own):", against_warm)
    others = family([(s, b, m) for s, b, metric in pairs for m in (*HELD_OUT, *(TRAINING if spec.training else ())) if m != metric])
    lines += family_lines("Exploratory: the primary pairs on the other held-out metrics (a Holm family of its own):", others)
    target = figures / name
    images = draw_all([p for p in points if p.used], target)
    passk = plot_passk(([warm] if warm else []) + [p for p in points if p.used], target / "passk.png")
    images = sorted(set(images) | ({passk} if passk else set()))
    lines += trajectory_lines(spec, by_label, warm, figures, target) if spec.trajectory else []
    lines += [f"![{name} {image.stem}](results/{name}/{image.name})" for image in images] + [""]
    quotes = ([quote(r, f"primary, Holm over {len(spec.primary)}") for r in primary]
              + [quote(r, f"exploratory, Holm over {len(against_warm)}") for r in against_warm]
              + [quote(r, f"exploratory, Holm over {len(others)}") for r in others])
    return lines, len(finished), quotes
