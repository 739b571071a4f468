"""The figures of each round, their medians and spreads, the table and the machine they were measured on."""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics

import torch
from rich.console import Console
from rich.table import Table

from rl_bench.arena import FIGURES as ARENA_FIGURES
from rl_bench.arena import arena_figures
from rl_bench.packing import FIGURES as PACKING_FIGURES
from rl_bench.packing import packing_figures
from rl_bench.settings import CLOCKS, TARGETS


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def round_figures(r: dict, clock: str) -> dict[str, float]:
    """The figures of one round on one clock.

    Step times for (a) are per-run medians; for (b) means over the run (one refresh window), so the
    seed generation at the window's first step is amortised over its steps. A round of ``--packing-only``
    has only the packed and padded updates, one of ``--arena-only`` only (e)'s entries and their DAPO sides. The
    tsctl figures come once per compile setting: uncompiled, and (``*_compiled``) with ``trainer.compile``.
    """
    fig = arena_figures(r, clock)
    if "update_packed" in r:
        fig |= packing_figures(r, clock)
    if "matmul_peak_gflops" not in r:
        return fig
    fig |= {
        "matmul_peak_gflops": r["matmul_peak_gflops"][clock],
        "shape_matmul_gflops": r["shape_matmul_gflops"][clock],
        "plain_update_gflops_per_s": r["plain_update_gflops"][clock],
    }
    fig["plain_update_share_of_peak"] = fig["plain_update_gflops_per_s"] / fig["matmul_peak_gflops"]
    fig["shape_matmul_share_of_peak"] = fig["shape_matmul_gflops"] / fig["matmul_peak_gflops"]
    if "trl" in r:
        fig["trl_step_median_s"] = statistics.median(r["trl"][f"{clock}_step_s"])
    for suffix in ("", "_compiled"):
        if f"tsctl_ratio0{suffix}" in r:
            fig |= tsctl_figures(r[f"tsctl_ratio0{suffix}"], r[f"tsctl_ratio25{suffix}"], clock, fig, suffix)
    if "tsctl_ratio0_compiled" in r:
        fig["compiled_update_speedup"] = fig["update_s"] / fig["update_s_compiled"]
        if clock == "wall":
            fig["compile_s"] = r["compile_s"]
    return fig


def tsctl_figures(r0: dict, r25: dict, clock: str, round_fig: dict[str, float], suffix: str) -> dict[str, float]:
    """tsctl's figures of one round from its ratio-0 and ratio-25 runs ``r0``/``r25``, their names ending in ``suffix``;
    ``round_fig`` holds the round's peak and TRL's step (when run)."""
    fig = {
        "tsctl_step_median_s": statistics.median(r0[f"{clock}_step_s"]),
        "tsctl_ratio0_step_mean_s": mean(r0[f"{clock}_step_s"]),
        "tsctl_ratio25_step_mean_s": mean(r25[f"{clock}_step_s"]),
        "update_s": statistics.median(r0[f"{clock}_update_s"]),
        "train_tokens_per_s": statistics.median(t / u for t, u in zip(r0["train_tokens"], r0[f"{clock}_update_s"])),
        "update_gflops_per_s": statistics.median(f / u for f, u in zip(r0["update_gflop"], r0[f"{clock}_update_s"])),
        "update_model_gflops_per_s": statistics.median(f / u for f, u in zip(r0["update_model_gflop"], r0[f"{clock}_update_s"])),
        "forward_token_share": statistics.median(r0["forward_token_share"]),
    }
    fig["b_ratio25_over_ratio0"] = fig["tsctl_ratio25_step_mean_s"] / fig["tsctl_ratio0_step_mean_s"]
    fig["d_update_share_of_peak"] = fig["update_gflops_per_s"] / round_fig["matmul_peak_gflops"]
    if clock == "wall":
        fig["ratio25_seeds_mean_s"] = mean(r25["wall_seeds_s"])
    if "trl_step_median_s" in round_fig:
        fig["a_tsctl_over_trl"] = fig["tsctl_step_median_s"] / round_fig["trl_step_median_s"]
    return {f"{name}{suffix}": value for name, value in fig.items()}


def generation_figures(generation: dict, clock: str) -> list[dict[str, float]]:
    """Per repeat of (c): tokens/s of each side and their ratio."""
    tokens = generation["tokens"]
    return [
        {"engine_tokens_per_s": tokens / e[clock], "generate_tokens_per_s": tokens / g[clock], "c_engine_over_generate": g[clock] / e[clock]}
        for e, g in zip(generation["seconds"]["engine"], generation["seconds"]["generate"])
    ]


def summarise(rounds: list[dict], generation: dict | None) -> dict[str, dict[str, dict]]:
    """``{figure: {clock: {median, min, max, values}}}`` over rounds (or repeats, for (c); None: not run)."""
    per_clock = {clock: [round_figures(r, clock) for r in rounds] + (generation_figures(generation, clock) if generation else []) for clock in CLOCKS}
    order = [*TARGETS, "compiled_update_speedup", "compile_s", "tsctl_step_median_s", "tsctl_step_median_s_compiled", "trl_step_median_s", "tsctl_ratio0_step_mean_s", "tsctl_ratio25_step_mean_s",
             "ratio25_seeds_mean_s", "engine_tokens_per_s", "generate_tokens_per_s", "update_s", "train_tokens_per_s",
             "update_gflops_per_s", "update_model_gflops_per_s", "forward_token_share", "update_s_compiled", "train_tokens_per_s_compiled",
             "update_gflops_per_s_compiled", "tsctl_ratio0_step_mean_s_compiled", "tsctl_ratio25_step_mean_s_compiled", "matmul_peak_gflops", "plain_update_gflops_per_s", "plain_update_share_of_peak",
             "shape_matmul_gflops", "shape_matmul_share_of_peak", *PACKING_FIGURES, *ARENA_FIGURES]
    out: dict[str, dict[str, dict]] = {}
    for name in order:
        for clock in CLOCKS:
            values = [f[name] for f in per_clock[clock] if name in f]
            if values:
                out.setdefault(name, {})[clock] = {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}
    return out


def met(name: str, value: float) -> bool:
    op, target = TARGETS[name]
    return value <= target if op == "<=" else value >= target


def print_table(console: Console, summary: dict[str, dict[str, dict]], args: argparse.Namespace) -> None:
    """One row per figure: wall and CPU medians with their min-max spread, and the verdict of the targets."""
    table = Table(title=f"medians over {args.rounds} rounds ((c): {args.gen_repeats} repeats), min-max in brackets; {args.threads} thread(s)")
    for column in ("figure", "wall clock", "CPU time", "target (wall)"):
        table.add_column(column, justify="right" if "clock" in column or "time" in column else "left")

    def cell(stats: dict | None) -> str:
        if stats is None:
            return ""
        fmt = "{:.3f}" if abs(stats["median"]) < 100 else "{:.0f}"
        return f"{fmt.format(stats['median'])} [{fmt.format(stats['min'])}-{fmt.format(stats['max'])}]"

    for name, clocks in summary.items():
        verdict = ""
        if name in TARGETS:
            op, target = TARGETS[name]
            verdict = f"{'met' if met(name, clocks['wall']['median']) else 'MISSED'} ({op} {target:g})"
        table.add_row(name, cell(clocks.get("wall")), cell(clocks.get("cpu")), verdict)
    console.print(table)


def machine() -> dict:
    """What the numbers were measured on."""
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "cpu": platform.machine(), "cores": os.cpu_count(), "threads": torch.get_num_threads()}
    with contextlib.suppress(ImportError):
        import trl

        info["trl"] = trl.__version__
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    with contextlib.suppress(OSError):
        info["load_average"] = os.getloadavg()
    return info
