"""Split bookkeeping shared by the generated task families (countdown, arithmetic).

Each split comes from its own random stream of ``data_seed``: held-out first, then train, which
rejects questions already held out. A split is deterministic, every prefix of it is stable when its
size grows, and questions are distinct across both splits.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Sequence, TypeVar

from tsctl.config.errors import ConfigError
from tsctl.tasks.base import Problem, Split

T = TypeVar("T")
C = TypeVar("C")
MAX_FAILED_DRAWS = 10_000


def int_config(cls: type[C], cfg: Any) -> C:
    """A plain ``cls`` dataclass copy of a generator config whose fields are all ints (``cfg`` may be an
    OmegaConf node: reading a node's attributes is slow in the generation loop)."""
    return cls(**{f.name: int(getattr(cfg, f.name)) for f in fields(cls)})


def draw_distinct(draw: Callable[[], tuple[str, T]], size: int, taken: set[str], family: str, knobs: str) -> list[tuple[str, T]]:
    """``size`` draws ``(question, payload)`` with a question that is non-empty, new and not in ``taken``.

    Raises:
        ConfigError: 10,000 draws in a row found nothing new; ``knobs`` names the config keys to raise.
    """
    found: dict[str, T] = {}
    failed = 0
    while len(found) < size:
        question, payload = draw()
        if question and question not in found and question not in taken:
            found[question] = payload
            failed = 0
            continue
        failed += 1
        if failed >= MAX_FAILED_DRAWS:
            raise ConfigError(
                "task.train_size",
                f"{family}: found only {len(found)} distinct questions for a split of {size} (plus {len(taken)} held out); "
                f"raise {knobs}, or lower task.train_size / task.heldout_size",
            )
    return list(found.items())


class SyntheticTask:
    """Caches the two splits of a generated family; subclasses implement :meth:`_generate`."""

    answer_marker = "Answer:"

    def __init__(self, train_size: int, heldout_size: int, data_seed: int) -> None:
        self.sizes: dict[str, int] = {"train": train_size, "heldout": heldout_size}
        self.data_seed = data_seed
        self._splits: dict[str, list[Problem]] = {}

    def problems(self, split: Split) -> Sequence[Problem]:
        """All problems of ``split`` (``train`` or ``heldout``), generated on first use."""
        if split not in self.sizes:
            raise ValueError(f"unknown split {split!r}; choose train or heldout")
        if split not in self._splits:
            taken = {p.question for p in self.problems("heldout")} if split == "train" else set()
            self._splits[split] = self._generate(split, taken)
        return self._splits[split]

    def _generate(self, split: str, taken: set[str]) -> list[Problem]:
        """The problems of ``split``, none of whose questions is in ``taken``."""
        raise NotImplementedError
