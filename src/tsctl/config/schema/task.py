"""The ``task`` group: the problems trained on (a generated family or a file) and their splits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TaskConfig:
    """The verifiable task: prompts for RL, worked solutions for warm-up, a verifier for rewards."""

    name: str = "countdown"
    """``countdown`` (default: early tokens carry real choices), ``arithmetic`` or ``file``. A task's own settings are a
    block beside it, ``task.<name>.*`` (``task.countdown.*`` in :mod:`tsctl.tasks.countdown`, ``task.arithmetic.*``,
    ``task.file.*``)."""
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
