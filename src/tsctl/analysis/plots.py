"""Figures of ``tsctl report``: one PNG per question, every line a sweep point (mean over its seeds).

- ``reward_accuracy.png``: training reward and held-out greedy accuracy against the training step;
- ``entropy_by_position.png``: entropy by response position at the start and at the end of training;
- ``clip_by_position.png``: clipped-token share by response position, split plain / prefix / suffix;
- ``passk.png``: held-out pass@k of the final checkpoint against k.

Shaded bands and error bars are the 95% Student-t confidence interval of the mean over seeds (shown
with two or more seeds; the legend says so).
A figure whose data no run has (e.g. pass@k without ``final_eval.json``) is not drawn.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
from matplotlib.ticker import MaxNLocator

from tsctl.analysis.figures import band, discard, figure, from_zero, half_width, save, styles
from tsctl.analysis.points import SOURCES, TAIL, Point, Run, tail

POSITION_AXIS = "token position in response (tokens, binned)"
SOURCE_TITLES = {
    "plain": "plain samples (unseeded)",
    "prefix": "prefix tokens (behaviour policy π_b)",
    "suffix": "suffix tokens (continuation by π_old)",
}
def series(runs: list[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps at which any run logged ``key``, with the mean and the CI half-width over the runs that did."""
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for record in run.records:
            if key in record:
                by_step.setdefault(int(record["step"]), []).append(float(record[key]))
    steps = np.array(sorted(by_step))
    return steps, np.array([np.mean(by_step[s]) for s in steps]), np.array([half_width(by_step[s]) for s in steps])


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average over ``window`` values (shorter at the start)."""
    if window <= 1 or values.size == 0:
        return values
    sums = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, values.size + 1)
    lo = np.maximum(0, idx - window)
    return (sums[idx] - sums[lo]) / (idx - lo)


def by_position(labels: Iterable[str]) -> list[str]:
    """Distinct position-bin labels (``0-3``, ``4-7``, ``64+``) in position order."""
    return sorted(set(labels), key=lambda label: int(label.split("-")[0].rstrip("+")))


def bin_labels(runs: list[Run], prefix: str) -> list[str]:
    """Position-bin labels under ``prefix`` in position order."""
    return by_position(k[len(prefix):] for run in runs for r in run.records for k in r if k.startswith(prefix))


def clip_prefix(runs: list[Run], source: str) -> str:
    """Key prefix of the clip fraction by position of ``source`` tokens.

    Runs without seeds (``ratio=0``) log no split by source: all their tokens are plain, so their
    ``clipped_by_pos`` is the plain one.
    """
    split = f"clipped_by_source_pos/{source}/"
    if source == "plain" and not bin_labels(runs, split):
        return "clipped_by_pos/"
    return split


def profile(runs: list[Run], prefix: str, labels: list[str], pick: Callable[[list[dict]], list[dict]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and CI half-width over runs of each bin's mean over the records ``pick`` selects (NaN where absent)."""
    per_run = []
    for run in runs:
        chosen = pick(run.train_records)
        row = [[r[prefix + b] for r in chosen if prefix + b in r] for b in labels]
        per_run.append([np.mean(v) if v else np.nan for v in row])
    values = np.array(per_run, dtype=float).reshape(len(runs), len(labels))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a bin no run reached is all NaN
        mean = np.nanmean(values, axis=0)
    half = np.array([half_width(column[~np.isnan(column)]) for column in values.T])
    return mean, half


def _train_steps(points: list[Point]) -> int:
    """Training records of the longest run (for window sizes and titles)."""
    return max((len(run.train_records) for p in points for run in p.used), default=0)


def plot_reward_accuracy(points: list[Point], path: Path) -> Optional[Path]:
    """Training reward (smoothed) and held-out greedy accuracy against the training step."""
    window = max(1, _train_steps(points) // 20)
    fig, (left, right) = figure(2)
    drawn = False
    for point, style in zip(points, styles(len(points))):
        steps, mean, half = series(point.used, "reward/mean")
        if steps.size:
            band(left, steps, smooth(mean, window), smooth(half, window), len(point.used), style, markers=False)
            drawn = True
        steps, mean, half = series(point.used, "eval/greedy_accuracy")
        if steps.size:
            band(right, steps, mean, half, len(point.used), style)
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        from_zero(ax)
    if not drawn:
        discard(fig)
        return None
    smoothing = f" (moving average over {window} steps)" if window > 1 else ""
    left.set(title=f"Training reward{smoothing}", xlabel="training step", ylabel="mean reward of sampled responses (0–1)")
    right.set(title="Held-out accuracy during training", xlabel="training step", ylabel="held-out greedy accuracy (fraction)")
    return save(fig, points, path)


def _position_axes(ax: Any, labels: list[str], title: str, ylabel: str) -> None:
    """Position bins as categorical x ticks, with title and axis labels."""
    ax.set_xticks(range(len(labels)), labels)
    ax.set(title=title, xlabel=POSITION_AXIS, ylabel=ylabel)


def plot_entropy_by_position(points: list[Point], path: Path) -> Optional[Path]:
    """Entropy by response position over the first and the last ``TAIL`` of training steps."""
    prefix = "entropy_by_pos/"
    labels = bin_labels([r for p in points for r in p.used], prefix)
    if not labels:
        return None
    fig, (start, end) = figure(2, sharey=True)
    count = max(1, round(_train_steps(points) * TAIL))
    windows = ((start, False, f"Start of training (first {count} step{'s' * (count > 1)})"), (end, True, f"End of training (last {count} step{'s' * (count > 1)})"))
    for ax, last, title in windows:
        for point, style in zip(points, styles(len(points))):
            mean, half = profile(point.used, prefix, labels, lambda rs, last=last: tail(rs, TAIL, last))
            band(ax, np.arange(len(labels)), mean, half, len(point.used), style)
        _position_axes(ax, labels, title, "entropy (nats/token)")
    return save(fig, points, path)


def plot_clip_by_position(points: list[Point], path: Path) -> Optional[Path]:
    """Share of clipped tokens by response position over all training steps, one panel per token source."""
    fig, axes = figure(len(SOURCES), sharey=True)
    drawn = False
    for ax, source in zip(axes, SOURCES):
        prefixes = [clip_prefix(point.used, source) for point in points]
        labels = by_position(label for point, prefix in zip(points, prefixes) for label in bin_labels(point.used, prefix))
        for point, prefix, style in zip(points, prefixes, styles(len(points))):
            mean, half = profile(point.used, prefix, labels, lambda rs: rs)
            if labels and not np.isnan(mean).all():
                band(ax, np.arange(len(labels)), 100 * mean, 100 * half, len(point.used), style)
        if not labels:
            ax.text(0.5, 0.5, f"no {source} tokens\n(ratio=0 has no seeds)" if source != "plain" else "no plain tokens", transform=ax.transAxes, ha="center", va="center", color="gray")
        drawn = drawn or bool(labels)
        _position_axes(ax, labels, f"Clipped: {SOURCE_TITLES[source]}", "clipped tokens (% of tokens, all steps)")
    if not drawn:
        discard(fig)
        return None
    from_zero(axes[0])
    return save(fig, points, path)


def plot_passk(points: list[Point], path: Path) -> Optional[Path]:
    """Held-out pass@k of the final checkpoint against k (log scale), from ``final_eval.json``."""
    fig, (ax,) = figure(1)
    ks: set[int] = set()
    for point, style in zip(points, styles(len(points))):
        finals = [r.final for r in point.used if r.final]
        k_values = sorted({int(k[5:]) for f in finals for k in f if k.startswith("pass@")})
        if not k_values:
            continue
        values = [[f[f"pass@{k}"] for f in finals if f"pass@{k}" in f] for k in k_values]
        mean, half = np.array([np.mean(v) for v in values]), np.array([half_width(v) for v in values])
        ax.errorbar(k_values, mean, yerr=half if len(finals) > 1 else None, lw=2, ms=5, capsize=3, **style)
        ks.update(k_values)
    if not ks:
        discard(fig)
        return None
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ks), [str(k) for k in sorted(ks)])
    ax.set(title="Held-out pass@k of the final checkpoint", xlabel="k (samples drawn per problem, log scale)", ylabel="held-out pass@k (fraction solved)")
    return save(fig, points, path)


FIGURES: dict[str, Callable[[list[Point], Path], Optional[Path]]] = {
    "reward_accuracy.png": plot_reward_accuracy,
    "entropy_by_position.png": plot_entropy_by_position,
    "clip_by_position.png": plot_clip_by_position,
    "passk.png": plot_passk,
}
"""Every figure of a report by file name."""


def draw_all(points: list[Point], folder: Path) -> list[Path]:
    """Draw every figure that has data into ``folder``; return the files written."""
    written = [draw(points, folder / name) for name, draw in FIGURES.items()]
    return [p for p in written if p is not None]
