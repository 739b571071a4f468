"""Figures of the attribution section (:mod:`tsctl.analysis.attribution`).

- ``attribution.png``: mean advantage of seeded samples by source, selector arm, behaviour age and
  prefix length, every line a sweep point (band: the t-interval over seeds);
- ``arm_choices.png``: the selector's choices over time, one panel per point that chose among
  several snapshots: each arm's share of the step's seeded samples (mean over seeds), stacked bars.

Neither is drawn without the metrics it needs (no seeds; no point choosing an older snapshot).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from tsctl.analysis.attribution import SPLITS, run_attribution, value_order
from tsctl.analysis.figures import band, colormap, discard, figure, half_width, save, styles
from tsctl.analysis.points import Point

ARM_KEY = "seeds/by_arm/"


def plot_attribution(points: list[Point], path: Path) -> Optional[Path]:
    """Mean advantage of seeded samples by each split value, one panel per split."""
    per_point = [[run_attribution(run) for run in p.used] for p in points]
    if not any(r for runs in per_point for r in runs):
        return None
    fig, axes = figure(len(SPLITS), sharey=True)
    for ax, (split, title) in zip(axes, SPLITS.items()):
        values = sorted({v for runs in per_point for r in runs for s, v in r if s == split}, key=value_order)
        for runs, style in zip(per_point, styles(len(points))):
            cells = [[r[(split, v)][2] for r in runs if (split, v) in r] for v in values]
            if any(cells):
                mean = np.array([np.mean(c) if c else np.nan for c in cells])
                half = np.array([half_width(c) for c in cells])
                band(ax, np.arange(len(values)), mean, half, len(runs), style)
        ax.set_xticks(range(len(values)), values)
        ax.axhline(0.0, color="gray", lw=1, ls=":")
        ax.set(title=f"Seeded samples by {title}", xlabel=title, ylabel="mean advantage (group mean = 0)")
    return save(fig, points, path)


def arm_shares(point: Point) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Steps, arm labels and each arm's share of the step's seeded samples [arms, steps], mean over runs."""
    arms = sorted({k.split("/")[2] for run in point.used for r in run.train_records for k in r if k.startswith(ARM_KEY)}, key=int)
    steps = sorted({int(r["step"]) for run in point.used for r in run.train_records if any(k.startswith(ARM_KEY) for k in r)})
    shares = np.zeros((len(arms), len(steps)))
    for j, step in enumerate(steps):
        runs = [next(r for r in run.train_records if r["step"] == step) for run in point.used if any(r["step"] == step for r in run.train_records)]
        for record in runs:
            counts = np.array([record.get(f"{ARM_KEY}{a}/samples", 0.0) for a in arms])
            shares[:, j] += counts / max(counts.sum(), 1.0) / len(runs)
    return np.array(steps), arms, shares


def plot_arm_choices(points: list[Point], path: Path) -> Optional[Path]:
    """Each arm's share of the seeded samples against the training step, one panel per point with several arms."""
    drawn = [(p, *arm_shares(p)) for p in points]
    drawn = [d for d in drawn if len(d[2]) > 1]
    if not drawn:
        return None
    fig, axes = figure(len(drawn), sharey=True)
    cmap = colormap("viridis")
    most = max(len(d[2]) for d in drawn)
    for ax, (point, steps, arms, shares) in zip(axes, drawn):
        colors = [cmap(int(a) / max(1, most - 1)) for a in arms]
        bottom = np.zeros(len(steps))
        for arm, share, color in zip(arms, shares, colors):
            label = f"arm {arm}" + (" (latest)" if arm == "0" else f" ({arm} window{'s' * (arm != '1')} old)")
            ax.bar(steps, share, width=1.0, bottom=bottom, color=color, label=label, linewidth=0)
            bottom += share
        ax.set(title=f"Arm choices: {point.label}", xlabel="training step", ylabel="share of seeded samples", ylim=(0, 1))
        ax.legend(loc="lower left", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    discard(fig)
    return path


FIGURES = {"attribution.png": plot_attribution, "arm_choices.png": plot_arm_choices}
"""The attribution figures by file name."""


def draw_attribution(points: list[Point], folder: Path) -> list[Path]:
    """Draw the attribution figures that have data into ``folder``; return the files written."""
    written = [draw(points, folder / name) for name, draw in FIGURES.items()]
    return [p for p in written if p is not None]
