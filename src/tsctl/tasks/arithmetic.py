"""Arithmetic chains: evaluate a sum/difference of a few numbers, one combination per line.

Question and worked solution (two numbers combined per line, then the answer line)::

    Compute 23+45-17.

    45-17=28
    23+28=51
    Answer: 51

The reward looks only at the final answer: 1 iff the text after the last ``Answer:`` is an integer
equal to the gold value (surrounding whitespace ignored).

The stored worked solution combines two randomly chosen parts of the expression per line, so the
evaluation order varies between problems: the expression is a list of signed terms; combining two
parts of the same sign adds them (``17+45=62`` inside ``80-17-45``), two of opposite signs subtracts
the smaller from the larger and keeps the sign of the larger. Every line therefore holds
non-negative numbers, and the final value (never negative: such questions are rejected) is the
expression's value.

Generation draws min_terms..max_terms terms, each with a digit count uniform in 1..max_digits and
a value uniform among those digits (no zero), and a random sign for every term after the first.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Problem
from tsctl.tasks.registry import TASKS
from tsctl.tasks.synthetic import SyntheticTask, draw_distinct, int_config

MAX_DIGITS = 6
"""The largest ``task.arithmetic.max_digits``: the most digits of one term."""
_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")


def format_question(terms: Sequence[int], signs: Sequence[int]) -> str:
    """``Compute 23+45-17.`` for terms (23, 45, 17) and signs (1, 1, -1); the first sign is +1."""
    body = "".join(("+" if sign > 0 else "-") + str(term) for term, sign in zip(terms, signs))
    return f"Compute {body[1:]}."


def worked_solution(terms: Sequence[int], signs: Sequence[int], rng: random.Random) -> str:
    """A random evaluation order of the expression, one combination per line, ending with the answer line.

    ValueError if the expression is negative.
    """
    parts = list(zip(signs, terms))
    lines = []
    while len(parts) > 1:
        i = int(len(parts) * rng.random())
        j = int((len(parts) - 1) * rng.random())
        i, j = (i, j + 1) if j >= i else (j, i)
        (sa, a), (sb, b) = parts.pop(j), parts.pop(i)
        if sa == sb:
            if rng.random() < 0.5:
                a, b = b, a
            parts.insert(i, (sa, a + b))
            lines.append(f"{a}+{b}={a + b}")
        else:
            if a < b:
                (sa, a), (sb, b) = (sb, b), (sa, a)
            parts.insert(i, (sa if a > b else 1, a - b))
            lines.append(f"{a}-{b}={a - b}")
    [(sign, value)] = parts
    if sign < 0 and value:
        raise ValueError(f"negative expression: {format_question(terms, signs)}")
    lines.append(f"Answer: {value}")
    return "\n".join(lines)


class ArithmeticTask(SyntheticTask):
    """Procedurally generated addition/subtraction chains with disjoint train and held-out splits."""

    name = "arithmetic"

    def __init__(self, cfg: ArithmeticSettings, train_size: int, heldout_size: int, data_seed: int) -> None:
        cfg = int_config(ArithmeticSettings, cfg)
        check_config(cfg)
        super().__init__(train_size, heldout_size, data_seed)
        self.cfg = cfg

    def reward(self, problem: Problem, response: str) -> float:
        """1.0 if the text after the last ``Answer:`` is the gold integer, else 0.0 (never raises)."""
        at = response.rfind(self.answer_marker)
        if at < 0:
            return 0.0
        text = response[at + len(self.answer_marker) :].strip()
        return 1.0 if _INTEGER.fullmatch(text) and int(text) == int(problem.answer) else 0.0

    def _generate(self, split: str, taken: set[str]) -> list[Problem]:
        rng = random.Random(f"arithmetic:{split}:{self.data_seed}")
        solution_rng = random.Random(f"arithmetic:{split}:{self.data_seed}:solutions")

        def draw() -> tuple[str, tuple[list[int], list[int]]]:
            terms, signs = self._draw(rng)
            negative = sum(t * s for t, s in zip(terms, signs)) < 0
            return ("" if negative else format_question(terms, signs)), (terms, signs)

        rows = draw_distinct(draw, self.sizes[split], taken, "arithmetic", "task.arithmetic.max_digits or max_terms")
        return [
            Problem(f"arithmetic-{split}-{i}", question, str(sum(t * s for t, s in zip(terms, signs))), worked_solution(terms, signs, solution_rng))
            for i, (question, (terms, signs)) in enumerate(rows)
        ]

    def _draw(self, rng: random.Random) -> tuple[list[int], list[int]]:
        """Random terms (digit count uniform in 1..max_digits, no zero) and signs (the first is +1)."""
        cfg, rand = self.cfg, rng.random
        count = cfg.min_terms + int((cfg.max_terms - cfg.min_terms + 1) * rand())
        terms = []
        for _ in range(count):
            low = 10 ** int(cfg.max_digits * rand())
            terms.append(low + int(9 * low * rand()))
        signs = [1] + [1 if rand() < 0.5 else -1 for _ in range(count - 1)]
        return terms, signs



@dataclass
class ArithmeticSettings:
    """``task.arithmetic.*``: evaluate a sum/difference of several multi-digit numbers step by step."""

    min_terms: int = 3
    """Fewest terms in the expression."""
    max_terms: int = 5
    """Most terms in the expression."""
    max_digits: int = 1
    """Each term has 1..max_digits digits (2 is much harder for the built-in model: ~4% after warm-up)."""

def check_config(cfg: ArithmeticSettings) -> None:
    """Refuse ``task.arithmetic`` settings the task cannot generate, in one line naming the key."""
    if not 2 <= cfg.min_terms <= cfg.max_terms:
        raise ConfigError("task.arithmetic.min_terms", "need 2 <= min_terms <= max_terms")
    if not 1 <= cfg.max_digits <= MAX_DIGITS:
        raise ConfigError("task.arithmetic.max_digits", f"{cfg.max_digits} is out of range; allowed: 1 <= task.arithmetic.max_digits <= {MAX_DIGITS}")


@TASKS.register("arithmetic", settings=ArithmeticSettings, check=lambda cfg, settings: check_config(settings))
def _build(cfg: TaskConfig, settings: ArithmeticSettings) -> ArithmeticTask:
    return ArithmeticTask(settings, cfg.train_size, cfg.heldout_size, cfg.data_seed)
