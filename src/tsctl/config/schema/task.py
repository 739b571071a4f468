"""The ``task`` group: the problems trained on (a generated family or a file) and their splits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class CountdownConfig:
    """Countdown: combine the given numbers with + - * to reach the target."""

    min_numbers: int = 3
    """Fewest numbers offered."""
    max_numbers: int = 4
    """Most numbers offered."""
    max_number: int = 10
    """Numbers are drawn from 1..max_number."""
    max_target: int = 100
    """Targets above this (or equal to a given number) are rejected while generating."""


@dataclass
class ArithmeticConfig:
    """Arithmetic chains: evaluate a sum/difference of several multi-digit numbers step by step."""

    min_terms: int = 3
    """Fewest terms in the expression."""
    max_terms: int = 5
    """Most terms in the expression."""
    max_digits: int = 1
    """Each term has 1..max_digits digits (2 is much harder for the built-in model: ~4% after warm-up)."""


@dataclass
class FileTaskConfig:
    """Bring-your-own task: a JSONL or Parquet file with one problem per row."""

    train_path: Optional[str] = None
    """File with the training problems (questions for RL, solutions for warm-up)."""
    heldout_path: Optional[str] = None
    """File with held-out problems; when absent, ``heldout_fraction`` of train_path is held out."""
    heldout_fraction: float = 0.1
    """Share of train_path held out when heldout_path is not given."""
    question_field: str = "question"
    """Field holding the question text."""
    solution_field: Optional[str] = "solution"
    """Field holding a worked solution (needed by warm-up only); null when there is none."""
    answer_field: str = "answer"
    """Field holding the gold final answer."""
    answer_rule: str = "field"
    """How the gold answer is read from answer_field: ``field`` (as is), ``boxed`` (last \\boxed{}),
    ``after_hashes`` (after the last ``####``) or ``list_first`` (first item of a list like ``['2']``)."""
    on_bad_row: str = "error"
    """A malformed row: ``error`` (stop, naming file, line and field) or ``skip`` (count and report)."""
    grader: str = "math_verify"
    """How answers are compared: ``exact``, ``numeric`` or ``math_verify``."""
    answer_pattern: str = "Answer:"
    """The final answer is the text after the last occurrence of this marker (or the last \\boxed{})."""
    instruction: Optional[str] = None
    """Text appended to each question on a new line, asking for the final answer in a form the grader reads (a
    model that writes none scores 0 on every response, and ``reward/answer_found`` shows it). Null = by ``grader``:
    ``math_verify`` asks for it ``within \\boxed{}`` (as the benchmarks do), ``numeric`` and ``exact`` for a last line
    ``<answer_pattern> <answer>``; ``''`` adds none (questions that already ask, or a model warmed up on the file)."""


@dataclass
class TaskConfig:
    """The verifiable task: prompts for RL, worked solutions for warm-up, a verifier for rewards."""

    name: str = "countdown"
    """``countdown`` (default: early tokens carry real choices), ``arithmetic`` or ``file``."""
    heldout_size: int = 1000
    """Held-out problems of a synthetic task (never overlapping the train split)."""
    train_size: int = 50000
    """Training problems of a synthetic task."""
    data_seed: int = 1234
    """Seed of the synthetic generators; train and held-out splits are disjoint for every seed."""
    overlong_prompts: str = "error"
    """A prompt that leaves the engine less than ``engine.max_new_tokens`` of its context (vLLM's
    ``max_model_len``, the hf engine's model ``max_position_embeddings``): ``error`` (refuse to start,
    saying how many and the fixes) or ``drop`` (leave such problems out of every split, and say how many).
    Checked before any sampling (:mod:`tsctl.models.prompt_fit`)."""
    heldout_overlap: str = "error"
    """A held-out prompt that is also a train prompt (the same question text): ``error`` (refuse to start, saying how
    many) or ``allow`` (go on, and say how many). Prompts repeated within a split are counted either way
    (:mod:`tsctl.tasks.split_checks`)."""
    countdown: CountdownConfig = field(default_factory=CountdownConfig)
    """Parameters of the countdown generator."""
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    """Parameters of the arithmetic-chain generator."""
    file: FileTaskConfig = field(default_factory=FileTaskConfig)
    """Parameters of a file-backed task (``task.name=file``)."""
