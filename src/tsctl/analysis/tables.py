"""The report as text: the summary and comparison tables for the console, Markdown and CSV."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from tsctl.analysis.claims import Assessed
from tsctl.analysis.compare import Row, Summary
from tsctl.analysis.nested import Components, contributions
from tsctl.analysis.points import TAIL, Point, header, higher_is_better
from tsctl.analysis.stats import Interval
from tsctl.analysis.wording import rules_out

if TYPE_CHECKING:
    from rich.table import Table


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


def is_nested(rows: list[Row]) -> bool:
    """Whether some comparison's runs come from two or more warm-up models (a random unit, :mod:`~tsctl.analysis.nested`)."""
    return any(r.warmups > 1 for r in rows)


def _span(values: Iterable[int]) -> str:
    """``2``, or ``8-16`` when the values differ; empty for none."""
    found = sorted(set(values))
    return "" if not found else str(found[0]) if len(found) == 1 else f"{found[0]}-{found[-1]}"


def design(rows: list[Row]) -> str:
    """The design of a table's comparisons, for its heading: ``warm-up models random (W), seeds nested (S each),
    crossed with problems (P)``, or ``warm-up model fixed (one), training seeds (S), crossed with problems (P)``
    (ranges where the rows differ; no problems without per-problem results)."""
    problems = _span(r.problems for r in rows if r.problems)
    crossed = f", crossed with problems ({problems})" if problems else ""
    random = [r for r in rows if r.warmups > 1]
    if not random:
        return f"warm-up model fixed (one), training seeds ({_span(len(r.seeds) for r in rows)}){crossed}"
    seeds = _span(len(r.seeds) // r.warmups for r in random)
    return f"warm-up models random ({_span(r.warmups for r in random)}), seeds nested ({seeds} each){crossed}"


def comparison_rows(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of the paired comparisons (over warm-up models where they are random)."""
    head = ["point", "vs baseline", "metric", "seeds", "point mean", "baseline mean", "diff (by seed)", "CI (by seed)",
            "p (paired t)", "diff (by problem)", "CI (by problem)", "p (seeds and problems)", "p (Holm)", "verdict"]
    nested = is_nested(rows)
    if nested:
        head[3], head[11] = "warm-ups × seeds", "p (warm-ups, seeds and problems)"
        head[6:9] = ["diff (by warm-up)", "CI (by warm-up)", "p (t over warm-ups)"]
    out = []
    for r in rows:
        b = r.by_problem
        pairs = f"{r.warmups}×{len(r.seeds) // r.warmups}" if nested else str(len(r.seeds))
        out.append([
            r.point.label, r.baseline.label, header(r.metric), pairs, f"{r.setting_mean:.3f}", f"{r.baseline_mean:.3f}",
            _signed(r.by_seed.diff.mean), _interval(r.by_seed.diff.low, r.by_seed.diff.high), _p(r.by_seed.p_value),
            _signed(b.diff.mean) if b else "–", _interval(b.diff.low, b.diff.high) if b else "–", _p(b.p_value) if b else "–",
            _p(r.p_holm), r.verdict,
        ])
    return head, out


def bounds_rows(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of what each comparison rules out: the deciding interval, the verdict, the
    bounds it puts on gains and losses, and the minimum detectable effect of the design."""
    head = ["point", "metric", "CI (deciding)", "verdict", "bounds (from the CI)",
            f"MDE (80% power, by {'warm-up model' if is_nested(rows) else 'seed'})"]
    out = []
    for r in rows:
        c = r.decided
        out.append([r.point.label, header(r.metric), f"{_interval(c.diff.low, c.diff.high)} ({r.how})", r.verdict,
                    rules_out(c.diff.low, c.diff.high, higher_is_better(r.metric)), "–" if math.isnan(r.mde) else f"{r.mde:.3f}"])
    return head, out


COMPONENTS = ("warmup", "seed", "problem", "warmup_x_problem", "residual")
"""The fields of :class:`~tsctl.analysis.nested.Components`, in the order the tables print them."""


def _component(value: float, share: float) -> str:
    """``0.0056 (97%)``: a variance component and its share of the mean difference's variance; ``–`` when not estimable."""
    return "–" if math.isnan(value) else f"{value:.2g} ({share:.0%})"


def components_rows(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of each comparison's variance components (:mod:`~tsctl.analysis.nested`), each with
    its share of the variance of the mean difference."""
    head = ["point", "metric", "warm-up model", "training seed", "problem", "warm-up × problem", "residual"]
    out = []
    for r in rows:
        c = r.components or Components(*[math.nan] * len(COMPONENTS))
        terms = [getattr(contributions(c, r.warmups, len(r.seeds) // r.warmups, r.problems or 1), k) for k in COMPONENTS]
        total = sum(t for t in terms if not math.isnan(t))
        shares = [t / total if total > 0 else 0.0 for t in terms]
        out.append([r.point.label, header(r.metric), *(_component(getattr(c, k), share) for k, share in zip(COMPONENTS, shares))])
    return head, out


def components_notes(rows: list[Row]) -> str:
    """What the variance components are, and what one warm-up model cannot say."""
    text = ("Variance components of each difference by the method of moments (`tsctl.analysis.nested`), floored at 0, "
            "each with its share of the variance of the mean difference, warm-up model / W + training seed / (W S) + problem / P "
            "+ warm-up × problem / (W P) + residual / (W S P) for W warm-up models, S seeds each and P problems; – where the "
            "design cannot estimate one (without per-problem results the training seed's is the whole spread of runs).")
    if is_nested(rows):
        return text + (" The warm-up model's share is what more seeds per warm-up model cannot reduce: halving it takes "
                       "twice the warm-up models.")
    return text + (" Warm-up variance is not estimable from one warm-up model: these intervals hold for this warm-up model "
                   "only (sweep `model.warmup.seed` to make the warm-up model a random unit).")


def notes(summary: Summary) -> str:
    """What the numbers are, for the Markdown page."""
    level = f"{summary.level:.0%}"
    text = (
        f"Cells are mean ± sample std [{level} Student-t confidence interval] over seeds (completed runs). "
        "Held-out greedy accuracy and pass@k (fractions) are for the final checkpoint (`final_eval.json`; without it, "
        f"the last in-training evaluation). Entropy by token source (nats/token) is the mean over the last {TAIL:.0%} of "
        "training steps, clipped tokens by source (% of tokens) the mean over all training steps; plain = unseeded "
        "samples, prefix = behaviour-policy prefix tokens, suffix = the continuation of a seeded sample."
    )
    if any(len({r.warmup for r in p.used}) > 1 for p in summary.points):
        text += (" A point whose runs come from two or more warm-up models has its cells over the warm-up models' means "
                 "of their seeds (n = warm-up models), the warm-up model a random unit.")
    return text


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


NESTED_NOTES = (
    " Where the runs come from two or more warm-up models (a sweep over `model.warmup.seed`; each run's manifest names "
    "the weights it started from, base_model.weights_sha256), runs pair by warm-up model and seed, and the warm-up model "
    "is a random unit: the columns by warm-up are the paired t over the warm-up models' mean differences, and by problem "
    "the warm-up models are a random effect with the training seeds nested in them, crossed with the problems (method "
    "of moments on the per-problem differences), both on W - 1 degrees of freedom, so every interval also covers which "
    "warm-up models were drawn. The MDE is that of the t over the warm-up models, the equivalence test is over them too. "
    "A warm-up model with more paired seeds than another contributes its first S, S the fewest any has. Under simulated "
    "nulls with the variance components of the records' two warm-up models at lr 2e-4 it calls a difference 3-6% of "
    "the time, where the test of one warm-up model's seeds and problems calls 14-63%."
)


def comparison_notes(summary: Summary, margin: float | None = None, rows: Sequence[Row] = ()) -> str:
    """What the comparison tables say and how they were computed, with the equivalence margin when one was given, and
    the nested design when some of ``rows`` come from two or more warm-up models."""
    alpha = f"{1 - summary.level:.2g}"
    text = COMPARISON_NOTES.format(level=f"{summary.level:.0%}", alpha=alpha) + (NESTED_NOTES if is_nested(list(rows)) else "")
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
        lines += [f"## Paired comparisons against {baseline}: {design(comparisons)}", "", *md_table(*comparison_rows(comparisons)), ""]
        lines += ["What each comparison rules out:", "", *md_table(*bounds_rows(comparisons)), ""]
        lines += [f"Variance components of each difference ({design(comparisons)}):", "", *md_table(*components_rows(comparisons)), ""]
        lines += [comparison_notes(summary, margin, comparisons), "", components_notes(comparisons), ""]
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
                     "p_holm", "mde_80_by_seed", "p_equivalence", "p_equivalence_holm", "verdict", "warmup_models",
                     *(f"var_{k}" for k in COMPONENTS)])
    for r in rows:
        s, b = r.by_seed, r.by_problem
        by_problem = [_number(x) for x in (b.diff.mean, b.diff.low, b.diff.high, b.p_value)] if b else ["", "", "", ""]
        equivalence = [_number(x) for x in (r.p_equivalence, r.p_equivalence_holm)] if r.p_equivalence is not None else ["", ""]
        writer.writerow([r.point.label, r.baseline.label, r.metric, len(r.seeds), _number(r.setting_mean), _number(r.baseline_mean),
                         *(_number(x) for x in (s.diff.mean, s.diff.low, s.diff.high, s.p_value)), *by_problem,
                         _number(r.p_holm), _number(r.mde), *equivalence, r.verdict, r.warmups,
                         *(_number(getattr(r.components, k)) if r.components else "" for k in COMPONENTS)])
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


def _rich_table(title: str, head: list[str], rows: list[list[str]]) -> Table:
    """A console table of ``rows`` under ``head``."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name in head:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


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
        verdicts = Table(title=f"Paired against {baseline} ({design(comparisons)}; point - baseline; p (Holm) over the whole table decides)",
                         title_justify="left")
        for name in ("point", "metric", "diff", f"{summary.level:.0%} CI", "p", "p (Holm)", "verdict"):
            verdicts.add_column(name, overflow="fold")
        for r in comparisons:
            c = r.decided
            verdicts.add_row(r.point.label, header(r.metric), _signed(c.diff.mean), f"{_interval(c.diff.low, c.diff.high)} ({r.how})",
                             _p(c.p_value), _p(r.p_holm), r.verdict)
        console.print(verdicts)
        units = "warm-up models" if is_nested(comparisons) else "seeds"
        bounds = Table(title=f"What each interval rules out, and the smallest effect the {units} could detect", title_justify="left")
        head, rows = bounds_rows(comparisons)
        for name in (head[0], head[1], head[4], head[5]):
            bounds.add_column(name, overflow="fold")
        for row in rows:
            bounds.add_row(row[0], row[1], row[4], row[5])
        console.print(bounds)
        console.print(_rich_table(f"Variance components ({design(comparisons)}; share of the mean difference's variance)",
                                  *components_rows(comparisons)))
        console.print(components_notes(comparisons), highlight=False, soft_wrap=True)
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
