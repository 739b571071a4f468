"""Countdown: reach a target from a few given numbers with + - * (the built-in default task).

Question and worked solution (one step per line, then the answer line)::

    Use 3 5 7 2 to make 24.

    5*3=15
    15+7=22
    22+2=24
    Answer: 24

What :func:`check_solution` accepts: at least one step line, then the answer line. Every step reads
``a op b=c`` with ``op`` one of ``+ - *`` (no division) and non-negative ASCII integers, the
arithmetic holds, and a subtraction has ``a >= b``; each operand is a number still available (each
given number as often as it is given, each result once after the step computing it; using a number
consumes it; not all numbers need be used). The last step's result is the target and the last line
is ``Answer: <target>``. Spaces around tokens and around the whole response are ignored.

The stored worked solution of a problem is drawn uniformly among all step sequences of the allowed
shape that reach the target (enumerated exhaustively; equal given numbers count as distinct), with
the operands of ``+`` and ``*`` in random order, so the warm-up data shows several ways to solve the
same kind of problem. The allowed shape avoids detours: no step gives 0 or multiplies by 1, every
intermediate result is used later, and the target appears only as the last result.

Generation draws 1..max_number for each of min_numbers..max_numbers numbers, then combines random
pairs of the numbers and results so far for 1 to count-1 steps; the last result is the target,
rejected when above max_target, equal to a given number, or already reached by an earlier step.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Sequence

import numpy as np

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Problem
from tsctl.tasks.registry import TASKS
from tsctl.tasks.synthetic import SyntheticTask, draw_distinct, int_config

MAX_NUMBERS = 5
"""Largest supported ``max_numbers``: five numbers have 52,360 solution shapes to enumerate (about
1.5 ms per distinct multiset of numbers, against about 0.02 ms for four)."""

_PLUS, _TIMES, _MINUS = 0, 1, 2
_OP_TEXT = "+*-"
_STEP = re.compile(r"([0-9]{1,12}) *([-+*]) *([0-9]{1,12}) *= *([0-9]{1,12})")
_ANSWER = re.compile(r"Answer: *([0-9]{1,12})")
_QUESTION = re.compile(r"Use ([0-9]+(?: [0-9]+)*) to make ([0-9]+)\.")
_CELLS_PER_CHUNK = 1 << 19

Step = tuple[int, int, int, int]
"""One step of a solution shape: columns of the left and right operands, op code, result column."""


def format_question(numbers: Sequence[int], target: int) -> str:
    """``Use 3 5 7 2 to make 24.``"""
    return f"Use {' '.join(map(str, numbers))} to make {target}."


def parse_question(question: str) -> tuple[list[int], int]:
    """The numbers and the target of a countdown question; ValueError if it is not one."""
    match = _QUESTION.fullmatch(question)
    if match is None:
        raise ValueError(f"not a countdown question: {question!r}")
    return [int(x) for x in match.group(1).split()], int(match.group(2))


def check_solution(numbers: Sequence[int], target: int, response: str) -> bool:
    """Whether ``response`` reaches ``target`` from ``numbers`` under the rules of the module docstring."""
    lines = [line.strip() for line in response.strip().split("\n")]
    answer = _ANSWER.fullmatch(lines[-1])
    if len(lines) < 2 or answer is None or int(answer.group(1)) != target:
        return False
    available = Counter(numbers)
    result = -1
    for line in lines[:-1]:
        step = _STEP.fullmatch(line)
        if step is None:
            return False
        a, op, b, result = int(step[1]), step[2], int(step[3]), int(step[4])
        if op == "+":
            value = a + b
        elif op == "*":
            value = a * b
        else:
            value = a - b
        if value != result:
            return False
        for operand in (a, b):
            if available[operand] == 0:
                return False
            available[operand] -= 1
        available[result] += 1
    return result == target


@dataclass(frozen=True)
class _Level:
    """The nodes at one depth of the tree of all step sequences on k numbers (see :func:`_tree`).

    Node i computes column ``first + i`` from columns ``left[i]`` and ``right[i]``: nodes
    ``[0, times)`` add, ``[times, minus)`` multiply, the rest subtract. ``parent[i]`` indexes the
    previous level; ``earlier[i]`` lists the columns of the results computed before node i.
    ``shape`` marks the nodes whose sequence leaves no intermediate result unused.
    """

    first: int
    left: np.ndarray
    right: np.ndarray
    parent: np.ndarray
    earlier: np.ndarray
    times: int
    minus: int
    shape: np.ndarray


@lru_cache(maxsize=None)
def _tree(k: int) -> tuple[tuple[_Level, ...], int, tuple[tuple[Step, ...], ...]]:
    """The prefix tree of step sequences on k numbers, its number of columns, and its shapes.

    Columns 0..k-1 hold the numbers (sorted); every node adds one result column. A shape is a
    sequence that leaves no intermediate result unused; shapes are listed level by level, in node
    order. ``+`` and ``*`` list each pair once, ``-`` both orders.
    """
    levels: list[_Level] = []
    shapes: list[tuple[Step, ...]] = []
    frontier: list[tuple[tuple[int, ...], tuple[Step, ...]]] = [(tuple(range(k)), ())]
    first = k
    for depth in range(k - 1):
        nodes = []
        for parent, (pool, steps) in enumerate(frontier):
            for i, j in combinations(range(len(pool)), 2):
                a, b = pool[i], pool[j]
                rest = pool[:i] + pool[i + 1 : j] + pool[j + 1 :]
                for left, right, op in ((a, b, _PLUS), (a, b, _TIMES), (a, b, _MINUS), (b, a, _MINUS)):
                    nodes.append((op, parent, left, right, rest, steps))
        nodes.sort(key=lambda node: node[0])
        frontier = []
        for i, (op, _, left, right, rest, steps) in enumerate(nodes):
            path = steps + ((left, right, op, first + i),)
            frontier.append((rest + (first + i,), path))
            if all(c < k for c in rest):
                shapes.append(path)
        ops = [node[0] for node in nodes]
        levels.append(
            _Level(
                first=first,
                left=np.array([node[2] for node in nodes]),
                right=np.array([node[3] for node in nodes]),
                parent=np.array([node[1] for node in nodes]),
                earlier=np.array([[step[3] for step in node[5]] for node in nodes], dtype=np.int64).reshape(
                    len(nodes), depth
                ),
                times=ops.index(_TIMES),
                minus=ops.index(_MINUS),
                shape=np.array([all(c < k for c in node[4]) for node in nodes]),
            )
        )
        first += len(nodes)
    return tuple(levels), first, tuple(shapes)


def _shape_results(multisets: np.ndarray) -> np.ndarray:
    """Result of every shape (rows, in :func:`_tree` order) on every column of ``multisets.T``.

    ``multisets`` holds one sorted multiset per row. A shape that takes a disallowed step (a
    subtraction giving 0 or less, a multiplication by 1) or whose final result also appears earlier
    gets -1. Arrays are laid out node-major so that gathering a node's values copies a whole row.
    """
    count, k = multisets.shape
    levels, width, _ = _tree(k)
    values = np.empty((width, count), dtype=np.int64)
    values[:k] = multisets.T
    allowed = np.ones((1, count), dtype=bool)
    finals = []
    for level in levels:
        a = np.take(values, level.left, axis=0)
        b = np.take(values, level.right, axis=0)
        t, m = level.times, level.minus
        result = values[level.first : level.first + len(a)]
        np.add(a[:t], b[:t], out=result[:t])
        np.multiply(a[t:m], b[t:m], out=result[t:m])
        np.subtract(a[m:], b[m:], out=result[m:])
        allowed = np.take(allowed, level.parent, axis=0)
        allowed[t:m] &= (a[t:m] != 1) & (b[t:m] != 1)
        allowed[m:] &= result[m:] > 0
        final, valid = result[level.shape], allowed[level.shape]
        for column in level.earlier[level.shape].T:
            valid &= final != np.take(values, column, axis=0)
        finals.append(np.where(valid, final, -1))
    return np.concatenate(finals, axis=0)


def sample_solutions(numbers: Sequence[Sequence[int]], targets: Sequence[int], rng: random.Random) -> list[str]:
    """One uniformly drawn worked solution per problem (see the module docstring), in input order.

    Each problem's draw depends only on ``rng`` and the problems before it. Shapes are evaluated
    once per distinct multiset of numbers. ValueError if a problem has no solution or more than
    MAX_NUMBERS numbers.
    """
    order_rng = random.Random(rng.getrandbits(64))
    uniforms = np.array([rng.random() for _ in numbers])
    keys = [tuple(sorted(row)) for row in numbers]
    chosen = np.full(len(numbers), -1, dtype=np.int64)
    for k in sorted({len(key) for key in keys}):
        if k > MAX_NUMBERS:
            raise ValueError(f"countdown supports at most {MAX_NUMBERS} numbers, got {k}")
        multisets = sorted({key for key in keys if len(key) == k})
        index = {key: i for i, key in enumerate(multisets)}
        problems = np.array([i for i, key in enumerate(keys) if len(key) == k])
        of_problem = np.array([index[keys[i]] for i in problems])
        order = np.argsort(of_problem, kind="stable")
        problems, of_problem = problems[order], of_problem[order]
        goals = np.array(targets, dtype=np.int64)[problems]
        table = np.array(multisets, dtype=np.int64)
        chunk = max(1, _CELLS_PER_CHUNK // _tree(k)[1])
        for lo in range(0, len(multisets), chunk):
            finals = _shape_results(table[lo : lo + chunk])
            first, last = np.searchsorted(of_problem, [lo, lo + chunk])
            hits = (finals[:, of_problem[first:last] - lo] == goals[first:last]).T
            counts = hits.sum(axis=1)
            if not counts.all():
                bad = problems[first + int(np.argmin(counts))]
                raise ValueError(f"no countdown solution reaches {targets[bad]} from {list(numbers[bad])}")
            starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
            picks = (uniforms[problems[first:last]] * counts).astype(np.int64)
            chosen[problems[first:last]] = np.nonzero(hits)[1][starts + picks]
    return [
        _render(key, target, _tree(len(key))[2][shape], order_rng)
        for key, target, shape in zip(keys, targets, chosen.tolist())
    ]


def _render(numbers: Sequence[int], target: int, shape: tuple[Step, ...], rng: random.Random) -> str:
    """The text of a shape applied to sorted ``numbers``, with ``+``/``*`` operands in random order."""
    values = dict(enumerate(numbers))
    lines = []
    for left, right, op, out in shape:
        a, b = values[left], values[right]
        values[out] = a + b if op == _PLUS else a * b if op == _TIMES else a - b
        if op != _MINUS and rng.random() < 0.5:
            a, b = b, a
        lines.append(f"{a}{_OP_TEXT[op]}{b}={values[out]}")
    lines.append(f"Answer: {target}")
    return "\n".join(lines)


class CountdownTask(SyntheticTask):
    """Procedurally generated countdown problems with disjoint train and held-out splits."""

    name = "countdown"

    def __init__(self, cfg: CountdownSettings, train_size: int, heldout_size: int, data_seed: int) -> None:
        cfg = int_config(CountdownSettings, cfg)
        check_config(cfg)
        super().__init__(train_size, heldout_size, data_seed)
        self.cfg = cfg

    def reward(self, problem: Problem, response: str) -> float:
        """1.0 if ``response`` is a correct solution of ``problem``, else 0.0 (never raises on a response)."""
        numbers, target = parse_question(problem.question)
        return 1.0 if check_solution(numbers, target, response) else 0.0

    def _generate(self, split: str, taken: set[str]) -> list[Problem]:
        rng = random.Random(f"countdown:{split}:{self.data_seed}")

        def draw() -> tuple[str, tuple[list[int], int]]:
            numbers, target = self._draw(rng)
            return ("" if target is None else format_question(numbers, target)), (numbers, target)

        found = draw_distinct(draw, self.sizes[split], taken, "countdown", "task.countdown.max_number, max_numbers or max_target")
        questions = [q for q, _ in found]
        rows = [row for _, row in found]
        solutions = sample_solutions(
            [n for n, _ in rows],
            [t for _, t in rows],
            random.Random(f"countdown:{split}:{self.data_seed}:solutions"),
        )
        return [
            Problem(f"countdown-{split}-{i}", question, str(t), solution)
            for i, (question, (_, t), solution) in enumerate(zip(questions, rows, solutions))
        ]

    def _draw(self, rng: random.Random) -> tuple[list[int], int | None]:
        """Random numbers and a target built from them as the module docstring says (None when rejected)."""
        cfg, rand = self.cfg, rng.random
        count = cfg.min_numbers + int((cfg.max_numbers - cfg.min_numbers + 1) * rand())
        numbers = [1 + int(cfg.max_number * rand()) for _ in range(count)]
        pool = numbers[:]
        results = []
        for _ in range(1 + int((count - 1) * rand())):
            a = pool.pop(int(len(pool) * rand()))
            b = pool.pop(int(len(pool) * rand()))
            ops = [_PLUS] + ([_TIMES] if a != 1 and b != 1 else []) + ([_MINUS] if a != b else [])
            op = ops[int(len(ops) * rand())]
            result = a + b if op == _PLUS else a * b if op == _TIMES else abs(a - b)
            results.append(result)
            pool.append(result)
        target = results[-1]
        if target > cfg.max_target or target in numbers or target in results[:-1]:
            return numbers, None
        return numbers, target



@dataclass
class CountdownSettings:
    """``task.countdown.*``: combine the given numbers with + - * to reach the target."""

    min_numbers: int = 3
    """Fewest numbers offered."""
    max_numbers: int = 4
    """Most numbers offered."""
    max_number: int = 10
    """Numbers are drawn from 1..max_number."""
    max_target: int = 100
    """Targets above this (or equal to a given number) are rejected while generating."""

def check_config(cfg: CountdownSettings) -> None:
    """Refuse ``task.countdown`` settings the task cannot generate, in one line naming the key."""
    if not 2 <= cfg.min_numbers <= cfg.max_numbers <= MAX_NUMBERS:
        raise ConfigError("task.countdown.min_numbers", f"need 2 <= min_numbers <= max_numbers <= {MAX_NUMBERS} (4 is fast; {MAX_NUMBERS} takes minutes to generate)")
    if cfg.max_number < 1 or cfg.max_target < 1:
        raise ConfigError("task.countdown.max_number", "task.countdown.max_number and task.countdown.max_target must be >= 1")


@TASKS.register("countdown", settings=CountdownSettings, check=lambda cfg, settings: check_config(settings))
def _build(cfg: TaskConfig, settings: CountdownSettings) -> CountdownTask:
    return CountdownTask(settings, cfg.train_size, cfg.heldout_size, cfg.data_seed)
