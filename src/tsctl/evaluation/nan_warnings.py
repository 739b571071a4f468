"""Warning lines for NaN/Inf metrics in what ``tsctl eval`` and ``tsctl report`` print.

A ``nan`` among the numbers of a table is easy to miss; these helpers name each non-finite metric,
the checkpoint or run it comes from and the step where the values went bad, for a warning printed
beside the table (and written into the report's ``summary.md``).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence


def nonfinite(value: Any) -> bool:
    """True for a float NaN or +-Inf (anything else, numbers or not, is False)."""
    return isinstance(value, float) and not math.isfinite(value)


def eval_warnings(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per ``tsctl eval`` result (checkpoint x benchmark) with a non-finite metric."""
    lines = []
    for r in results:
        bad = [f"{key} = {value}" for key, value in r.items() if nonfinite(value)]
        if bad:
            step = f" (step {r['step']})" if r.get("step") is not None else ""
            lines.append(
                f"{r['checkpoint_path']}{step} on {r['benchmark']}: {', '.join(bad)}; the model's weights or outputs "
                "are not finite (evaluate an earlier checkpoint)"
            )
    return lines


def run_warnings(name: str, values: Mapping[str, float], records: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line naming the run's non-finite summary ``values`` and the steps of ``records`` (its
    ``metrics.jsonl``) that hold NaN/Inf; no line when every value is finite."""
    bad = [key for key, value in values.items() if nonfinite(value)]
    if not bad:
        return []
    steps = [(r.get("step"), [k for k, v in r.items() if nonfinite(v)]) for r in records]
    steps = [(step, keys) for step, keys in steps if keys]
    where = "metrics.jsonl holds no NaN/Inf"
    if steps:
        first, keys = steps[0]
        shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
        where = f"metrics.jsonl has NaN/Inf at {len(steps)} step(s), first at step {first} ({shown})"
    return [f"run {name}: {', '.join(bad)} not finite; {where}"]
