"""Rich progress bars for long work (quiet when stdout is not a terminal and CI is set)."""

from __future__ import annotations

import os

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)


def make_progress() -> Progress:
    """A progress bar with step counter, elapsed and remaining time, and a free-text status field."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
        disable=bool(os.environ.get("TSCTL_NO_PROGRESS")),
    )
