"""Drawing helpers shared by the report's figures: styles per point, a row of panels, bands, the legend and saving.

Shaded bands and error bars are the 95% Student-t confidence interval of the mean over seeds, shown
with two or more seeds (the legend says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from tsctl.analysis.points import Point  # noqa: E402
from tsctl.analysis.stats import mean_ci  # noqa: E402

MARKERS = "osD^vP*X"


def styles(count: int) -> list[dict[str, Any]]:
    """A distinct colour and marker per point (markers keep overlapping lines apart)."""
    cmap = plt.get_cmap("tab10" if count <= 10 else "tab20")
    return [{"color": cmap(i % cmap.N), "marker": MARKERS[i % len(MARKERS)]} for i in range(count)]


def figure(panels: int, sharey: bool = False) -> tuple[Figure, list[Any]]:
    """A row of ``panels`` axes with room for a figure legend on the right."""
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels + 2.2, 4.4), layout="constrained", squeeze=False, sharey=sharey)
    for ax in axes[0]:
        ax.grid(True, alpha=0.3)
    return fig, list(axes[0])


def save(fig: Figure, points: list[Point], path: Path) -> Path:
    """Add the figure legend (one entry per point), write the PNG and close the figure."""
    handles = [plt.Line2D([], [], lw=2, ms=6, **style) for style in styles(len(points))]
    seeds = max((len(p.used) for p in points), default=0)
    title = "sweep point\n(bands, bars: 95% CI over seeds)" if seeds > 1 else "sweep point"
    fig.legend(handles, [p.label for p in points], loc="outside right upper", title=title, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def band(ax: Any, x: np.ndarray, mean: np.ndarray, half: np.ndarray, runs: int, style: dict[str, Any], markers: bool = True) -> None:
    """A line with a ± ``half`` band (the confidence interval's half-width) when there are two or more runs."""
    ax.plot(x, mean, lw=2, ms=5, markevery=1 if markers else max(1, len(x) // 10), **style)
    if runs > 1:
        ax.fill_between(x, mean - half, mean + half, color=style["color"], alpha=0.18, lw=0)


def from_zero(ax: Any) -> None:
    """Start the y axis just below 0, so lines at 0 stay visible."""
    top = max(ax.get_ylim()[1], 1e-6)
    ax.set_ylim(-0.03 * top, top)


def half_width(values: Any) -> float:
    """Half-width of the 95% t-interval of the mean of ``values``, as in the summary table (0 for fewer than two)."""
    return mean_ci(values).half_width if len(values) > 1 else 0.0


def discard(fig: Figure) -> None:
    """Close a figure that will not be saved (nothing to show)."""
    plt.close(fig)


def colormap(name: str) -> Any:
    """A matplotlib colormap by name."""
    return plt.get_cmap(name)
