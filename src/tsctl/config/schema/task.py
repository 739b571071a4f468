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
    reward: str = "correct"
    """What a training sample is rewarded for, with any task (:mod:`tsctl.tasks.reward_controls`; the controls of
    Shao et al., "Spurious Rewards", arXiv 2506.10947): ``correct`` (the task's grade), ``random`` (1 with probability
    ``task.reward_p``, drawn per sample from the run's seed, independent of the response) or ``format`` (1 when the
    response states a final answer the grader can read, right or wrong). Held-out evaluation still grades correctness."""
    reward_p: float = 0.5
    """``task.reward=random``: the probability of reward 1 (0 < p < 1; 0.5 as the paper's random reward)."""
