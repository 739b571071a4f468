"""``tsctl report``: summary tables with confidence intervals, paired comparisons and plots of a sweep or a run.

A sweep's statistics count completed runs only, and failed or unfinished runs are listed beside
the table (a run whose manifest says ``running`` but whose process is gone is ``interrupted``); a
report on one run uses it whatever its status. A run whose summary values include
NaN/Inf is named in a warning (console and ``summary.md``) with the first step where its metrics went
bad; so are runs that ran different revisions of the code. Outputs go to ``<sweep>/report/`` or
``<run>/plots/``: ``summary.md`` (the tables, the notes and the plots), ``summary.csv``,
``comparisons.csv`` (sweeps with a baseline), ``attribution.csv`` (runs with seeds: where the gain
came from, :mod:`~tsctl.analysis.attribution`) and PNGs. A sweep of ``ratio`` alone with a ``ratio=0``
point also gets the method's four claims assessed (:mod:`~tsctl.analysis.claims`).

Rooms: :mod:`~tsctl.analysis.points` reads run folders and groups them into points,
:mod:`~tsctl.analysis.compare` computes intervals and paired comparisons (:mod:`tsctl.analysis.stats`; over seeds
and problems together, :mod:`~tsctl.analysis.crossed`; over warm-up models, the seeds nested in them and problems,
:mod:`~tsctl.analysis.nested`, for a sweep over ``model.warmup.seed``),
Holm-adjusted within each family (:mod:`~tsctl.analysis.families`), with the minimum detectable effect of each
(:mod:`~tsctl.analysis.power`) and their verdicts and bounds put into words by :mod:`~tsctl.analysis.wording`;
:mod:`~tsctl.analysis.tables` writes them as text, :mod:`~tsctl.analysis.plots` and
:mod:`~tsctl.analysis.attribution_plots` draw the figures with :mod:`~tsctl.analysis.figures`,
:mod:`~tsctl.analysis.attribution` writes the seeded samples by source, arm, age and prefix length, :mod:`~tsctl.analysis.claims`
what a ratio sweep says of the method's claims.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from tsctl.analysis.attribution import attribution_csv, attribution_rows, markdown_section
from tsctl.analysis.claims import assess, is_ratio_sweep
from tsctl.analysis.claims import markdown_section as claims_section
from tsctl.analysis.compare import compare, default_baseline, parse_baseline, summarize
from tsctl.analysis.points import (
    FINAL_EVAL,
    Run,
    arithmetic_warnings,
    base_model_warnings,
    final_values,
    find_runs,
    group_points,
    is_run_folder,
    revision_warnings,
)
from tsctl.analysis.stats import LEVEL
from tsctl.analysis.tables import comparisons_csv, csv_text, markdown, print_claims, print_tables
from tsctl.config.errors import ConfigError
from tsctl.evaluation.nan_warnings import run_warnings
from tsctl.io import atomic

__all__ = ["FINAL_EVAL", "find_runs", "report"]

NONFINITE, MIXED_CODE, MIXED_MODELS, MIXED_ARITHMETIC = (
    "non-finite metric", "runs of different code", "runs from different base models", "runs of different arithmetic")
"""Kinds of warning a report gives (console and ``summary.md``)."""


def report(path: Path, echo: bool = True, baseline: Optional[str] = None, level: float = LEVEL,
           equivalence_margin: Optional[float] = None) -> Path:
    """Write the summary (Markdown, CSV), the paired comparisons and the plots of the sweep or run at ``path``; return the output folder.

    Args:
        baseline: the setting every other point is compared with, e.g. ``"ratio=0"``; None takes the
            first value of the first swept key.
        level: confidence level of every interval.
        equivalence_margin: the margin, in the held-out metrics' units, of the equivalence test of each held-out
            comparison; None: no comparison is called equivalent.

    Raises:
        FileNotFoundError: ``path`` holds no run.
        ConfigError: the baseline is malformed or matches no point.
    """
    from tsctl.analysis.attribution_plots import draw_attribution
    from tsctl.analysis.plots import draw_all

    path = Path(path)
    runs = find_runs(path)
    single = is_run_folder(path)
    out = path / ("plots" if single else "report")
    points = group_points(runs, single=single)
    summary = summarize(points, level)
    try:
        chosen = parse_baseline(baseline) if baseline else default_baseline(path, points)
    except ValueError as err:
        raise ConfigError("report.baseline", str(err)) from None
    if baseline and not any(all(p.settings.get(k) == v for k, v in chosen.items()) for p in points):
        labels = ", ".join(p.label for p in points)
        raise ConfigError("report.baseline", f"{baseline!r} matches no point of {path}; the points are: {labels}")
    rows = compare(summary, chosen, equivalence_margin) if chosen and not single else []
    named = " ".join(f"{k}={v}" for k, v in chosen.items()) if chosen else ""
    images = draw_all(points, out) + draw_attribution(points, out)
    attribution = attribution_rows(points, level)
    title = f"{'Run' if single else 'Sweep'} {path.name}"
    warnings = [(NONFINITE, line) for p in points for run in p.used for line in run_warnings(run.path.name, final_values(run), run.records)]
    warnings += [(MIXED_CODE, line) for line in revision_warnings(points)]
    warnings += [(MIXED_MODELS, line) for line in base_model_warnings(points)]
    warnings += [(MIXED_ARITHMETIC, line) for line in arithmetic_warnings(points)]
    notes = "".join(f"\n**Warning: {kind}.** {line}\n" for kind, line in warnings)
    assessed = assess(points, summary, rows if chosen == {"ratio": "0"} else None) if not single and is_ratio_sweep(points) else []
    claims = claims_section(assessed) if assessed else ""
    atomic.write_text(out / "summary.md", markdown(summary, rows, named, title, images, equivalence_margin) + claims + markdown_section(attribution, level) + notes)
    if attribution:
        atomic.write_text(out / "attribution.csv", attribution_csv(attribution))
    atomic.write_text(out / "summary.csv", csv_text(summary))
    if rows:
        atomic.write_text(out / "comparisons.csv", comparisons_csv(rows))
    if echo:
        print_tables(summary, rows, named, title, warnings)
        if assessed:
            print_claims(assessed)
    log_images(images, runs)
    return out


def log_images(images: list[Path], runs: list[Run]) -> None:
    """Log ``images`` to the active wandb run, if there is one, at the runs' last step."""
    wandb = sys.modules.get("wandb")
    if wandb is None or wandb.run is None:
        return
    step = max((r.get("step", 0) for run in runs for r in run.records), default=0)
    wandb.run.log({f"plots/{p.stem}": wandb.Image(str(p), caption=p.stem) for p in images}, step=step)
