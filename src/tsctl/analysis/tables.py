"""The report as text: the summary and comparison tables for the console, Markdown and CSV."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from tsctl.analysis.claims import Assessed
from tsctl.analysis.compare import Row, Summary
from tsctl.analysis.points import TAIL, Point, header, higher_is_better
from tsctl.analysis.stats import Interval
from tsctl.analysis.wording import rules_out


def fmt(cell: Interval | None) -> str:
    """``0.412 ± 0.013 [0.380, 0.444]``: mean ± std [t-interval]; ``0.412`` for one run, ``–`` for none."""
    if cell is None:
        return "–"
    if cell.n < 2:
        return f"{cell.mean:.3f}"
    return f"{cell.mean:.3f} ± {cell.std:.3f} [{cell.low:.3f}, {cell.high:.3f}]"


def completed(point: Point) -> str:
    """``2/3``: completed runs of all the point's runs."""
    return f"{sum(r.status == 'completed' for r in point.runs)}/{len(point.runs)}"


def table_rows(summary: Summary) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows (one per point) shared by the console and Markdown tables."""
    head = ["point", "completed runs", *map(header, summary.metrics)]
    rows = [[p.label, completed(p), *(fmt(cells.get(m)) for m in summary.metrics)] for p, cells in zip(summary.points, summary.cells)]
    return head, rows


def _signed(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:+.3f}"


def _interval(low: float, high: float) -> str:
    return "–" if math.isnan(low) else f"[{low:+.3f}, {high:+.3f}]"


def _p(p: float) -> str:
    if math.isnan(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def comparison_rows(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of the paired comparisons."""
    head = ["point", "vs baseline", "metric", "seeds", "point mean", "baseline mean", "diff (by seed)", "CI (by seed)",
            "p (paired t)", "diff (by problem)", "CI (by problem)", "p (seeds and problems)", "p (Holm)", "verdict"]
    out = []
    for r in rows:
        b = r.by_problem
        out.append([
            r.point.label, r.baseline.label, header(r.metric), str(len(r.seeds)), f"{r.setting_mean:.3f}", f"{r.baseline_mean:.3f}",
            _signed(r.by_seed.diff.mean), _interval(r.by_seed.diff.low, r.by_seed.diff.high), _p(r.by_seed.p_value),
            _signed(b.diff.mean) if b else "–", _interval(b.diff.low, b.diff.high) if b else "–", _p(b.p_value) if b else "–",
            _p(r.p_holm), r.verdict,
        ])
    return head, out


def bounds_rows(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of what each comparison rules out: the deciding interval, the verdict, the
    bounds it puts on gains and losses, and the minimum detectable effect of the design."""
    head = ["point", "metric", "CI (deciding)", "verdict", "bounds (from the CI)", "MDE (80% power, by seed)"]
    out = []
    for r in rows:
        c = r.decided
        out.append([r.point.label, header(r.metric), f"{_interval(c.diff.low, c.diff.high)} ({r.how})", r.verdict,
                    rules_out(c.diff.low, c.diff.high, higher_is_better(r.metric)), "–" if math.isnan(r.mde) else f"{r.mde:.3f}"])
    return head, out


def notes(summary: Summary) -> str:
    """What the numbers are, for the Markdown page."""
    level = f"{summary.level:.0%}"
    return (
        f"Cells are mean ± sample std [{level} Student-t confidence interval] over seeds (completed runs). "
        "Held-out greedy accuracy and pass@k (fractions) are for the final checkpoint (`final_eval.json`; without it, "
        f"the last in-training evaluation). Entropy by token source (nats/token) is the mean over the last {TAIL:.0%} of "
        "training steps, clipped tokens by source (% of tokens) the mean over all training steps; plain = unseeded "
        "samples, prefix = behaviour-policy prefix tokens, suffix = the continuation of a seeded sample."
    )


COMPARISON_NOTES = (
    "Each point against its baseline, paired by seed: the mean difference (point - baseline), its {level} t-interval "
    "and the paired t-test's p-value. By problem, where every paired run stored per-problem results (pass@k of a "
    "problem by the unbiased estimator over its samples): the same difference over held-out problems and seeds, with "
    "seed and problem as crossed random effects (two-way analysis of variance of the per-problem differences, "
    "Satterthwaite degrees of freedom), so the interval also covers which problems were drawn and counts the "
    "seed-by-problem noise once; it equals the paired t over seeds when the problems disagree no more than that noise "
    "predicts. Under simulated nulls with the built-in tasks' variance components it calls a difference about 5% of "
    "the time. The deciding p-value (by problem when there is one, else by seed) is Holm-adjusted over every comparison of the table (one family); the verdict is `better`/`worse` "
    "when the adjusted p is below {alpha}, otherwise `not distinguishable`; entropy and clip shares have no better "
    "direction and say `higher`/`lower`. The intervals are per comparison, not adjusted. \"Rules out\" reads the "
    "deciding interval's ends in the metric's units; the MDE is the difference the paired t-test over these seeds "
    "would detect with 80% power (two-sided, alpha {alpha}, noncentral t at the observed spread of the paired "
    "differences)."
)


def comparison_notes(summary: Summary, margin: float | None = None) -> str:
    """What the comparison tables say and how they were computed, with the equivalence margin when one was given."""
    alpha = f"{1 - summary.level:.2g}"
    text = COMPARISON_NOTES.format(level=f"{summary.level:.0%}", alpha=alpha)
    if margin is None:
        return text + " No equivalence margin was given (`report.equivalence_margin`), so no equivalence test was run."
    return text + (f" Held-out metrics are also tested for equivalence within ±{margin:g} (TOST over seeds, Holm-adjusted "
                   f"the same way): `equivalent within ±{margin:g}` when that adjusted p is below {alpha}.")


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines: the header, the rule, one line per row (a ``|`` inside a cell escaped)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]


def markdown(summary: Summary, comparisons: list[Row], baseline: str, title: str, images: list[Path], margin: float | None = None) -> str:
    """The report as Markdown: summary, notes, comparisons with what they rule out, failures and the plots."""
    lines = [f"# {title}", "", *md_table(*table_rows(summary)), "", notes(summary), ""]
    if comparisons:
        lines += [f"## Paired comparisons against {baseline}", "", *md_table(*comparison_rows(comparisons)), ""]
        lines += ["What each comparison rules out:", "", *md_table(*bounds_rows(comparisons)), ""]
        lines += [comparison_notes(summary, margin), ""]
    failed = failures_text(summary.points)
    if failed:
        lines += ["## Failed or unfinished runs", "", *(f"- {line}" for line in failed), ""]
    lines += [f"![{image.stem}]({image.name})" for image in images]
    return "\n".join(lines) + "\n"


def failures_text(points: list[Point]) -> list[str]:
    """One line per failed or unfinished run, with its error when known."""
    return [f"{r.path.name}: {r.status}" + (f" — {r.error}" if r.error else "") for p in points for r in p.failures]


def csv_text(summary: Summary) -> str:
    """The summary as CSV: settings, run counts, then ``<metric>_{mean,std,ci_low,ci_high,n}`` (empty when absent)."""
    keys = list(dict.fromkeys(k for p in summary.points for k in p.settings))
    stats = ("mean", "std", "ci_low", "ci_high", "n")
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["point", *keys, "runs", "completed", "used", *(f"{m}_{s}" for m in summary.metrics for s in stats)])
    for point, cells in zip(summary.points, summary.cells):
        done = sum(r.status == "completed" for r in point.runs)
        values = []
        for m in summary.metrics:
            c = cells.get(m)
            values += [_number(x) for x in (c.mean, c.std, c.low, c.high, c.n)] if c else [""] * len(stats)
        writer.writerow([point.label, *(point.settings.get(k, "") for k in keys), len(point.runs), done, len(point.used), *values])
    return buffer.getvalue()


def comparisons_csv(rows: list[Row]) -> str:
    """The paired comparisons as CSV, one row per point and metric (empty cells where a method did not apply)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["point", "baseline", "metric", "seeds", "point_mean", "baseline_mean", "diff_by_seed", "ci_low_by_seed",
                     "ci_high_by_seed", "p_paired_t", "diff_by_problem", "ci_low_by_problem", "ci_high_by_problem", "p_by_problem",
                     "p_holm", "mde_80_by_seed", "p_equivalence", "p_equivalence_holm", "verdict"])
    for r in rows:
        s, b = r.by_seed, r.by_problem
        by_problem = [_number(x) for x in (b.diff.mean, b.diff.low, b.diff.high, b.p_value)] if b else ["", "", "", ""]
        equivalence = [_number(x) for x in (r.p_equivalence, r.p_equivalence_holm)] if r.p_equivalence is not None else ["", ""]
        writer.writerow([r.point.label, r.baseline.label, r.metric, len(r.seeds), _number(r.setting_mean), _number(r.baseline_mean),
                         *(_number(x) for x in (s.diff.mean, s.diff.low, s.diff.high, s.p_value)), *by_problem,
                         _number(r.p_holm), _number(r.mde), *equivalence, r.verdict])
    return buffer.getvalue()


def _number(x: float) -> str:
    """A CSV number; empty for NaN (no interval from one run)."""
    return "" if math.isnan(x) else f"{x:.6g}"


def transpose(head: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """One row per metric and one column per point (for narrow consoles)."""
    columns = [head, *rows]
    return [c[0] for c in columns], [[c[i] for c in columns] for i in range(1, len(head))]


def _width(head: list[str], rows: list[list[str]]) -> int:
    """Characters a rich table needs without wrapping."""
    return sum(max(len(cell) for cell in column) + 3 for column in zip(head, *rows)) + 1


def print_tables(summary: Summary, comparisons: list[Row], baseline: str, title: str, warnings: list[tuple[str, str]] = ()) -> None:
    """The summary (a row per metric when that fits, else a row per point), the verdicts, the failures and
    the ``warnings`` (kind, text) on the console."""
    from rich.table import Table

    from tsctl.io.progress import console

    head, rows = table_rows(summary)
    if _width(*transpose(head, rows)) <= console.width:
        head, rows = transpose(head, rows)
    table = Table(title=f"{title}: mean ± std [{summary.level:.0%} CI] over seeds", title_justify="left")
    for name in head:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if comparisons:
        verdicts = Table(title=f"Paired against {baseline} (point - baseline; p (Holm) over the whole table decides)", title_justify="left")
        for name in ("point", "metric", "diff", f"{summary.level:.0%} CI", "p", "p (Holm)", "verdict"):
            verdicts.add_column(name, overflow="fold")
        for r in comparisons:
            c = r.decided
            verdicts.add_row(r.point.label, header(r.metric), _signed(c.diff.mean), f"{_interval(c.diff.low, c.diff.high)} ({r.how})",
                             _p(c.p_value), _p(r.p_holm), r.verdict)
        console.print(verdicts)
        bounds = Table(title="What each interval rules out, and the smallest effect the seeds could detect", title_justify="left")
        head, rows = bounds_rows(comparisons)
        for name in (head[0], head[1], head[4], head[5]):
            bounds.add_column(name, overflow="fold")
        for row in rows:
            bounds.add_row(row[0], row[1], row[4], row[5])
        console.print(bounds)
    for line in failures_text(summary.points):
        console.print(f"[red]{line}[/red]", highlight=False)
    for kind, line in warnings:
        console.print(f"[red]warning: {kind}:[/red] {line}", highlight=False, soft_wrap=True)


def print_claims(assessed: Assessed) -> None:
    """Each of the method's claims with what the ratio sweep's comparisons say of it, on the console."""
    from tsctl.io.progress import console

    console.print("The Thinking Seeds claims, as these runs see them (details in summary.md):", highlight=False)
    for claim, status, _ in assessed:
        console.print(f"  {claim.title}: {status.replace('**', '')}", highlight=False, soft_wrap=True)
