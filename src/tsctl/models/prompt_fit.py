"""Prompts that leave no room for their response, found before any sampling: refused, or left out.

An engine serves at most ``context`` tokens of prompt + prefix + response per request (vLLM's
``engine.max_model_len``; the ``hf`` engine's model ``max_position_embeddings``, or its sliding window
when shorter). A response takes at most ``engine.max_new_tokens``; a Thinking Seeds row's prefix and
continuation share that budget, except that a prefix which takes the whole of it is still continued
by one sampled token. So a prompt fits when ``len(prompt_ids) + max_new_tokens (+ 1 with seeds) <= context``
(:func:`tsctl.trainer.rollout.prompt_room`). Unchecked, vLLM refuses a longer request on the step that
draws it, hours into a run (and again after every resume), and the ``hf`` engine runs it at positions
the model never saw. ``task.overlong_prompts`` chooses what happens instead, before a run
starts: ``error`` (the default: stop, saying how many prompts are too long and the fixes) or ``drop``
(leave those problems out, and say how many). A question of far more characters than a prompt may hold tokens
(:func:`prompt_length`) is counted too long without being tokenized, so a huge row costs no memory here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tsctl.config.errors import ConfigError
from tsctl.io.progress import console
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem, Split, Task


@dataclass(frozen=True)
class PromptRoom:
    """How long a prompt may be.

    Attributes:
        context: tokens the engine serves per request (prompt + prefix + response); None: no limit known.
        max_new_tokens: the response budget (``engine.max_new_tokens``).
        policy: ``error`` or ``drop`` (``task.overlong_prompts``).
        seeded: requests may carry a seed prefix, which may take the whole budget and is then continued
            by one more token.
    """

    context: int | None
    max_new_tokens: int
    policy: str
    seeded: bool = False

    @property
    def longest_prompt(self) -> int | None:
        """Most prompt tokens that leave the longest response (None: no limit)."""
        return None if self.context is None else self.context - self.max_new_tokens - int(self.seeded)


SPARE = 4
"""How many times the characters a prompt of the limit could hold (:attr:`PromptFormatter.most_chars_per_token`) a
question must have to be counted too long untokenized: room for a tokenizer that drops or merges characters."""


def prompt_length(formatter: PromptFormatter, question: str, limit: int) -> int | None:
    """Tokens of the prompt for ``question``, or None, without tokenizing, for a question whose characters are more than
    :data:`SPARE` times what a prompt of ``limit`` tokens could hold: past ``limit`` whatever the tokenizer."""
    if len(question) > SPARE * (limit + 1) * formatter.most_chars_per_token:
        return None
    return len(formatter.prompt_ids(question))


def needed_context(problems: Sequence[Problem], formatter: PromptFormatter, max_new_tokens: int, seeded: bool) -> int | None:
    """Tokens per request that leave every prompt of ``problems`` room for its response: the inverse of
    :attr:`PromptRoom.longest_prompt` (the longest prompt + ``max_new_tokens``, + 1 when ``seeded``); None without problems."""
    if not problems:
        return None
    return max(len(formatter.prompt_ids(p.question)) for p in problems) + max_new_tokens + int(seeded)


def fitting(problems: Sequence[Problem], formatter: PromptFormatter, room: PromptRoom, what: str) -> list[Problem]:
    """The problems whose prompts fit ``room``, in order (all of them when they all fit).

    Args:
        problems: the problems to check.
        formatter: encodes each question as the engine will see it.
        room: the limit and what to do with a prompt past it.
        what: the problems' name in messages (``"train"``, ``"math500"``).

    Raises:
        ConfigError: a prompt is too long and the policy is ``error``, or none fits.
    """
    limit = room.longest_prompt
    if limit is None or not problems:
        return list(problems)
    lengths = [prompt_length(formatter, p.question, max(limit, 0)) for p in problems]
    kept = [p for p, n in zip(problems, lengths) if n is not None and n <= limit]
    if len(kept) == len(problems):
        return kept
    too_long = len(problems) - len(kept)
    untokenized = [len(p.question) for p, n in zip(problems, lengths) if n is None]
    longest = f"{max(untokenized)} characters" if untokenized else str(max(n for n in lengths if n is not None))
    where = (
        f"{too_long} of {len(problems)} {what} prompts are longer than the {max(limit, 0)} tokens left to a prompt "
        f"(the engine serves {room.context} tokens per request, engine.max_new_tokens={room.max_new_tokens} of them for the "
        f"response{' and one for the token after a seed that takes all of it' if room.seeded else ''}; the longest prompt has {longest})"
    )
    fixes = "lower engine.max_new_tokens, or give the engine a longer context (engine.max_model_len with vllm, up to the model's)"
    if not kept:
        raise ConfigError("task.overlong_prompts", f"{where}: none is left to use; {fixes}")
    if room.policy != "drop":
        raise ConfigError("task.overlong_prompts", f"{where}; leave them out with task.overlong_prompts=drop, or {fixes}")
    console.print(f"[yellow]{what}: left out {too_long} of {len(problems)} prompts[/yellow] (too long; task.overlong_prompts=drop)", highlight=False)
    return kept


class FittingTask:
    """``task`` with, in every split, only the problems whose prompts fit ``room`` (see :func:`fitting`).

    A split is checked the first time it is asked for, and kept.
    """

    def __init__(self, task: Task, formatter: PromptFormatter, room: PromptRoom) -> None:
        self.task = task
        self.formatter = formatter
        self.room = room
        self.name = task.name
        self.answer_marker = task.answer_marker
        self._splits: dict[str, list[Problem]] = {}

    def problems(self, split: Split) -> list[Problem]:
        """The split's problems whose prompts fit, in the task's order."""
        if split not in self._splits:
            self._splits[split] = fitting(self.task.problems(split), self.formatter, self.room, split)
        return self._splits[split]

    def reward(self, problem: Problem, response: str) -> float:
        """The wrapped task's reward."""
        return self.task.reward(problem, response)
