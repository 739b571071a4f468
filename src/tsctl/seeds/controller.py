"""The seed controller (``truncation=target_pass``): which behaviour response to cut, and where, so that a prompt's
seeded samples pass about ``seeds.target_pass`` of the time.

A GRPO group whose samples all pass or all fail has zero advantage and teaches nothing. The controller steers each
group's seeded samples toward a useful pass rate from what it has measured, online, while every prefix keeps its
gradient with its importance ratio against the stored behaviour policy:

- **What it measures.** Every behaviour response is graded when its window's shard is written (the shard's
  ``behaviour_reward``; right = reward >= 1). Every step, each seeded sample adds its *lift* to the cell of its
  prefix fraction bin (:data:`BINS` equal bins of ``cut / span``) and of whether its behaviour response was right:
  its own success (0 or 1) minus the pass rate of its group's plain samples. The per-step sums are appended to
  ``seeds/controller.jsonl`` (one line per step, dropped past a resumed checkpoint, like the bandit's arm log),
  so the controller's state is that file and a resumed run makes the same choices.
- **A prompt's pass rate** ``pi_q``: its graded behaviour responses and the plain samples of its earlier groups,
  shrunk toward the task-wide plain pass rate of the last window with ``seeds.controller_prior`` pseudo-samples:
  ``pi_q = (solved + prior * task_rate) / (graded + plain + prior)``.
- **The prediction** of a seeded sample's success at bin ``b`` from a right (or wrong) response:
  ``clip(pi_q + lift(b, right), 0, 1)``, the task-wide lift shrunk toward 0 with the same prior:
  ``lift = sum / (count + prior)``.
- **The choice** for each prompt: a prompt that mostly fails (``pi_q < target - seeds.controller_band``) gets
  prefixes of *right* responses (when one of its responses is right), one that mostly passes
  (``pi_q > target + band``) prefixes of *wrong* ones (when one is wrong), one in between any; among those, the
  ``k`` (response, bin) pairs whose predicted success is nearest ``seeds.target_pass`` (ties: earlier response,
  then shorter cut), cut at the bin's centre. Before the controller has measured anything (the first window)
  every prompt keeps the default cut (``seeds.lo``..``seeds.hi``, as ``uniform``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from tsctl.config.knobs import window_length
from tsctl.config.schema import TsctlConfig
from tsctl.io.step_logs import keep_through, read_step_log
from tsctl.models.samples import Sample
from tsctl.tasks.base import SOLVED

BINS = 4
"""Equal bins of the prefix fraction ``cut / span``: [0, .25), [.25, .5), [.5, .75), [.75, 1]."""
RIGHT, WRONG = "right", "wrong"


def fraction_bin(fraction: float) -> int:
    """The bin of a prefix fraction in [0, 1]."""
    return min(BINS - 1, max(0, int(fraction * BINS)))


def centre(b: int) -> float:
    """The prefix fraction at the centre of bin ``b``."""
    return (b + 0.5) / BINS


def cell(b: int, right: bool) -> str:
    return f"{b}/{RIGHT if right else WRONG}"


def step_cells(samples: Sequence[Sample]) -> dict:
    """One step's line of the log: each cell's (lift sum, seeded samples), the plain samples' (solved, count), and
    each prompt's plain (solved, count)."""
    groups: dict[int, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    cells: dict[str, list[float]] = {}
    plain = [0.0, 0]
    prompts: dict[str, list[float]] = {}
    for members in groups.values():
        solved = [float(s.reward >= SOLVED) for s in members if not s.seeded]
        if not solved:
            continue
        rate = sum(solved) / len(solved)
        plain = [plain[0] + sum(solved), plain[1] + len(solved)]
        mine = prompts.setdefault(members[0].prompt_id, [0.0, 0])
        mine[0], mine[1] = mine[0] + sum(solved), mine[1] + len(solved)
        for s in members:
            if s.seeded and s.seed_fraction is not None and s.seed_reward is not None:
                key = cell(fraction_bin(s.seed_fraction), s.seed_reward >= SOLVED)
                total = cells.setdefault(key, [0.0, 0])
                total[0], total[1] = total[0] + float(s.reward >= SOLVED) - rate, total[1] + 1
    return {"cells": cells, "plain": plain, "prompts": prompts}


@dataclass(frozen=True)
class State:
    """What the log says before a window opens: each cell's (lift sum, count), the last window's plain pass rate,
    and each prompt's plain (solved, count)."""

    cells: dict[str, tuple[float, int]]
    task_rate: float | None
    prompts: dict[str, tuple[float, int]]


class Controller:
    """The controller of one run: its log at ``path`` and its settings from ``cfg`` (see the module docstring)."""

    def __init__(self, path: Path, cfg: TsctlConfig) -> None:
        self.path, self.cfg = path, cfg

    def truncate(self, after_step: int) -> None:
        """Drop the lines of steps after ``after_step`` (work a killed run did past its checkpoint)."""
        if self.path.is_file():
            keep_through(read_step_log(self.path), after_step)

    def observe(self, step: int, samples: Sequence[Sample]) -> None:
        """Append step ``step``'s (counted from 1) line."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **step_cells(samples)}, sort_keys=True) + "\n")
            f.flush()

    def state(self, first: int) -> State:
        """The sums of every line of a step before ``first`` (0-based), and the plain pass rate of the last window."""
        cells: dict[str, list[float]] = {}
        prompts: dict[str, list[float]] = {}
        recent = [0.0, 0]
        window = window_length(self.cfg)
        for line in read_step_log(self.path).records if self.path.is_file() else []:
            if line["step"] > first:  # steps are counted from 1: line N is 0-based step N - 1
                continue
            for key, (total, count) in line["cells"].items():
                mine = cells.setdefault(key, [0.0, 0])
                mine[0], mine[1] = mine[0] + total, mine[1] + count
            for prompt, (solved, count) in line["prompts"].items():
                mine = prompts.setdefault(prompt, [0.0, 0])
                mine[0], mine[1] = mine[0] + solved, mine[1] + count
            if line["step"] > first - window:
                recent = [recent[0] + line["plain"][0], recent[1] + line["plain"][1]]
        return State({k: (v[0], int(v[1])) for k, v in cells.items()}, recent[0] / recent[1] if recent[1] else None,
                     {k: (v[0], int(v[1])) for k, v in prompts.items()})

    def place(self, columns: dict[str, list], first: int, k: int) -> dict[str, list]:
        """The seed columns of the window opening at ``first`` (``k`` rows per prompt, graded) with each prompt's rows
        replaced by the controller's choice (:func:`choose`); unchanged before it has measured anything."""
        state = self.state(first)
        if not state.cells:
            return columns
        s = self.cfg.seeds
        rows = len(columns["prompt_id"])
        graded = np.asarray(columns["behaviour_reward"], dtype=np.float64)
        task_rate = state.task_rate if state.task_rate is not None else float(np.mean(graded >= SOLVED))
        out: dict[str, list] = {name: [] for name in columns}
        for lo in range(0, rows, k):
            group = range(lo, lo + k)
            responses = [(columns["span"][i], bool(graded[i] >= SOLVED)) for i in group]
            solved, seen = state.prompts.get(columns["prompt_id"][lo], (0.0, 0))
            rate = prompt_rate(sum(r for _, r in responses) + solved, len(responses) + seen, task_rate, s.controller_prior)
            for index, cut, predicted in choose(responses, k, rate, state.cells, self.cfg):
                for name in columns:
                    out[name].append(columns[name][lo + index])
                out["cut"][-1], out["predicted"][-1] = cut, predicted
        return out


def prompt_rate(solved: float, seen: int, task_rate: float, prior: float) -> float:
    """A prompt's pass rate, shrunk toward the task's: ``(solved + prior * task_rate) / (seen + prior)``."""
    return (solved + prior * task_rate) / (seen + prior)


def predict(rate: float, b: int, right: bool, cells: dict[str, tuple[float, int]], prior: float) -> float:
    """Predicted success of a seeded sample at bin ``b`` of a right (or wrong) response for a prompt of pass rate ``rate``."""
    total, count = cells.get(cell(b, right), (0.0, 0))
    return min(1.0, max(0.0, rate + total / (count + prior)))


def choose(responses: Sequence[tuple[int, bool]], k: int, rate: float, cells: dict[str, tuple[float, int]], cfg: TsctlConfig) -> list[tuple[int, int, float]]:
    """``k`` (response index, cut, predicted success) for one prompt whose behaviour responses are ``(span, right)``."""
    s = cfg.seeds
    allowed = list(range(len(responses)))
    if rate < s.target_pass - s.controller_band and any(right for _, right in responses):
        allowed = [i for i, (_, right) in enumerate(responses) if right]
    elif rate > s.target_pass + s.controller_band and not all(right for _, right in responses):
        allowed = [i for i, (_, right) in enumerate(responses) if not right]
    candidates = []
    for i in allowed:
        span, right = responses[i]
        for b in range(BINS):
            predicted = predict(rate, b, right, cells, s.controller_prior)
            candidates.append((abs(predicted - s.target_pass), i, b, min(span, math.floor(centre(b) * span + 0.5)), predicted))
    candidates.sort(key=lambda c: c[:3])
    return [(c[1], c[3], c[4]) for c in (candidates[j % len(candidates)] for j in range(k))]


def controller_metrics(samples: Sequence[Sample]) -> dict[str, float]:
    """``controller/*``: the predicted and realised pass rate of the step's seeded samples the controller placed,
    the share it placed, and the mean prefix fraction of seeds from right and from wrong responses."""
    seeded = [s for s in samples if s.seeded]
    placed = [s for s in seeded if s.seed_predicted is not None]
    out: dict[str, float] = {}
    if seeded:
        out["controller/placed"] = len(placed) / len(seeded)
    if placed:
        out["controller/predicted"] = float(np.mean([s.seed_predicted for s in placed]))
        out["controller/realised"] = float(np.mean([s.reward >= SOLVED for s in placed]))
    for name, right in ((RIGHT, True), (WRONG, False)):
        fractions = [s.seed_fraction for s in seeded if s.seed_fraction is not None and s.seed_reward is not None and (s.seed_reward >= SOLVED) == right]
        if fractions:
            out[f"controller/prefix_fraction/{name}"] = float(np.mean(fractions))
    return out
