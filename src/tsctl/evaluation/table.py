"""The rich table of ``tsctl eval`` results: one row per checkpoint and benchmark."""

from __future__ import annotations

from typing import Any, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from tsctl.evaluation.nan_warnings import eval_warnings

_WIDEST = 1000
"""Upper bound of a table's natural width, in characters."""


def print_results(results: Sequence[dict[str, Any]], console: Console) -> None:
    """Print :func:`results_table`; at its natural width when the output is not a terminal (a file, a pipe, CI).

    A warning line below it names every checkpoint and benchmark with a NaN/Inf metric.
    """
    table = results_table(results)
    if not console.is_terminal:
        table.width = Measurement.get(console, console.options.update_width(_WIDEST), table).maximum
    console.print(table, crop=False)
    for line in eval_warnings(results):
        console.print(f"[red]warning: non-finite metric:[/red] {line}", highlight=False, soft_wrap=True)


def results_table(results: Sequence[dict[str, Any]]) -> Table:
    """Rows in result order (checkpoints, then benchmarks within each); columns are the metrics of
    :mod:`tsctl.evaluation.benchmark_scores`, with one pass@k column per k found in the results."""
    ks = sorted({int(key.removeprefix("pass@")) for r in results for key in r if key.startswith("pass@")})
    table = Table(title="tsctl eval", title_justify="left", caption=_sampling(results[0]) if results else None, caption_justify="left")
    for header in ("checkpoint", "benchmark"):
        table.add_column(header, no_wrap=True)
    for header in ("problems", "greedy", *(f"pass@{k}" for k in ks), "entropy", "length", "truncated", "skipped"):
        table.add_column(header, justify="right")
    for index, r in enumerate(results):
        last_of_checkpoint = index + 1 == len(results) or results[index + 1]["checkpoint"] != r["checkpoint"]
        table.add_row(
            r["checkpoint"],
            r["benchmark"],
            str(r["problems"]),
            f"{r['greedy_accuracy']:.3f}",
            *(_rate(r.get(f"pass@{k}")) for k in ks),
            f"{r['entropy']:.3f}",
            f"{r['mean_length']:.1f}",
            f"{r['truncation_rate']:.3f}",
            str(r["skipped_rows"]),
            end_section=last_of_checkpoint,
        )
    return table


def _rate(value: float | None) -> str:
    """A rate with three decimals, or a dash when it was not computed."""
    return "-" if value is None else f"{value:.3f}"


def _sampling(result: dict[str, Any]) -> str:
    """How the samples were drawn, as a caption line."""
    s = result["sampling"]
    return (
        f"{result['k']} samples per problem at temperature {s['temperature']:g}, top_p {s['top_p']:g}, "
        f"seed {s['seed']}; greedy at temperature 0; at most {s['max_new_tokens']} new tokens"
    )
