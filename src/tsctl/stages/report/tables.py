"""The report as text: the summary and comparison tables for the console, Markdown and CSV."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from tsctl.stages.report.claims import Assessed
from tsctl.stages.report.compare import Row, Summary
from tsctl.stages.report.points import TAIL, Point, header
from tsctl.stages.report.stats import Interval


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
            "p (paired t)", "diff (by problem)", "CI (by problem)", "p (bootstrap)", "verdict"]
    out = []
    for r in rows:
        b = r.by_problem
        out.append([
            r.point.label, r.baseline.label, header(r.metric), str(len(r.seeds)), f"{r.setting_mean:.3f}", f"{r.baseline_mean:.3f}",
            _signed(r.by_seed.diff.mean), _interval(r.by_seed.diff.low, r.by_seed.diff.high), _p(r.by_seed.p_value),
            _signed(b.diff.mean) if b else "–", _interval(b.diff.low, b.diff.high) if b else "–", _p(b.p_value) if b else "–",
            r.verdict,
        ])
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
    "and the paired t-test's p-value. By problem: a paired bootstrap over held-out problems and seeds "
    "({resamples} draws, percentile interval) where every paired run stored per-problem results (pass@k of a "
    "problem by the unbiased estimator over its samples). The verdict is "
    "`better`/`worse` when the interval (by problem when there is one, else by seed) excludes 0, otherwise `not "
    "distinguishable`; entropy and clip shares have no better direction and say `higher`/`lower`."
)


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]


def markdown(summary: Summary, comparisons: list[Row], baseline: str, title: str, images: list[Path]) -> str:
    """The report as Markdown: summary, notes, comparisons, failures and the plots."""
    from tsctl.stages.report.compare import BOOTSTRAP_RESAMPLES

    lines = [f"# {title}", "", *_md_table(*table_rows(summary)), "", notes(summary), ""]
    if comparisons:
        lines += [f"## Paired comparisons against {baseline}", "", *_md_table(*comparison_rows(comparisons)), ""]
        lines += [COMPARISON_NOTES.format(level=f"{summary.level:.0%}", resamples=BOOTSTRAP_RESAMPLES), ""]
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
                     "ci_high_by_seed", "p_paired_t", "diff_by_problem", "ci_low_by_problem", "ci_high_by_problem", "p_bootstrap", "verdict"])
    for r in rows:
        s, b = r.by_seed, r.by_problem
        by_problem = [_number(x) for x in (b.diff.mean, b.diff.low, b.diff.high, b.p_value)] if b else ["", "", "", ""]
        writer.writerow([r.point.label, r.baseline.label, r.metric, len(r.seeds), _number(r.setting_mean), _number(r.baseline_mean),
                         *(_number(x) for x in (s.diff.mean, s.diff.low, s.diff.high, s.p_value)), *by_problem, r.verdict])
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
        verdicts = Table(title=f"Paired against {baseline} (point - baseline)", title_justify="left")
        for name in ("point", "metric", "diff", f"{summary.level:.0%} CI", "p", "verdict"):
            verdicts.add_column(name, overflow="fold")
        for r in comparisons:
            c = r.by_problem or r.by_seed
            method = "problems x seeds" if r.by_problem else f"{len(r.seeds)} seeds"
            verdicts.add_row(r.point.label, header(r.metric), _signed(c.diff.mean), f"{_interval(c.diff.low, c.diff.high)} ({method})", _p(c.p_value), r.verdict)
        console.print(verdicts)
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
