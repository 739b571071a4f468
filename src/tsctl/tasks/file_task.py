"""Bring-your-own task: problems from a JSONL or Parquet file, graded by :mod:`tsctl.tasks.grading`.

The train split is ``task.file.train_path``; the held-out split is ``task.file.heldout_path`` or,
without one, a ``heldout_fraction`` of the train file drawn with the task's data seed. Both keep file
order. Every question ends with ``task.file.instruction`` on a new line (by default a request for the final
answer in the form ``task.file.grader`` reads, :func:`instruction`). Worked solutions that do not state a
final answer get an ``"<answer_pattern> <answer>"`` line.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence

from tsctl.config.errors import ConfigError
from tsctl.config.ranges import in_range, one_of
from tsctl.config.schema import FileTaskConfig, TaskConfig
from tsctl.tasks.base import Problem, Split
from tsctl.tasks.grading import GRADERS, answer_instruction, ensure_answer_line, response_reward
from tsctl.tasks.records import ANSWER_RULES, DataError, Record, read_records
from tsctl.tasks.registry import TASKS

logger = logging.getLogger(__name__)


class FileTask:
    """A :class:`~tsctl.tasks.base.Task` over problem files (``task.name=file``)."""

    name = "file"

    def __init__(self, cfg: FileTaskConfig, data_seed: int, *, on_bad_row: str = "error") -> None:
        """Read and split the files now, so a data problem surfaces before any training starts.

        Args:
            cfg: the ``task.file`` config.
            data_seed: seed of the held-out split when it is drawn from the train file.
            on_bad_row: ``error`` (stop at a malformed row) or ``skip`` (drop and count it).

        Raises:
            ConfigError: settings :func:`check_config` refuses.
            DataError: a missing file, a malformed row, or a missing field.
        """
        check_config(cfg)
        self.cfg = cfg
        self.answer_marker: str | None = cfg.answer_pattern
        self.instruction = instruction(cfg)
        self.skipped = 0
        """Bad rows dropped while reading (``on_bad_row=skip``)."""
        train = self._read(cfg.train_path, on_bad_row, "train_path")
        if cfg.heldout_path:
            heldout = self._read(cfg.heldout_path, on_bad_row, "heldout_path")
        else:
            train, heldout = _split(train, cfg.heldout_fraction, data_seed)
        self._splits: dict[str, list[Problem]] = {
            "train": [self._problem("train", record) for record in train],
            "heldout": [self._problem("heldout", record) for record in heldout],
        }

    def problems(self, split: Split) -> Sequence[Problem]:
        """All problems of a split, in file order."""
        if split not in self._splits:
            raise ValueError(f"unknown split {split!r}: choose train or heldout")
        return self._splits[split]

    def reward(self, problem: Problem, response: str) -> float:
        """1.0 when the response's final answer matches the gold answer under ``task.file.grader``, else 0.0."""
        return response_reward(response, problem.answer, self.answer_marker, self.cfg.grader)

    def _read(self, path: str, on_bad_row: str, key: str) -> list[Record]:
        """The good rows of ``path`` (named by ``task.file.<key>``); DataError when there are none."""
        cfg = self.cfg
        fields = {"question": cfg.question_field, "answer": cfg.answer_field, "solution": cfg.solution_field}
        records, skipped = read_records(
            path,
            fields,
            on_bad_row,
            answer_rule=cfg.answer_rule,
            optional=("solution",),
            fix=lambda key: f"set task.file.{key}_field=<the field that holds the {key}>",
            skip_key="task.file.on_bad_row",
            path_key=f"task.file.{key}",
        )
        if skipped:
            logger.warning("%s: skipped %d malformed rows (on_bad_row=skip)", path, skipped)
        if not records:
            what = f"all {skipped} of its rows are malformed and were skipped" if skipped else "the file is empty or blank"
            raise DataError(f"{path} holds no problem ({what}); point task.file.{key} at a file with one JSON object per line (or Parquet rows)")
        self.skipped += skipped
        return records

    def _problem(self, split: str, record: Record) -> Problem:
        values = record.values
        answer = values["answer"] or ""
        question = values["question"] or ""
        return Problem(
            id=f"file-{split}-{record.line}",
            question=f"{question}\n{self.instruction}" if self.instruction else question,
            answer=answer,
            solution=ensure_answer_line(values["solution"], answer, self.answer_marker),
        )


def _split(records: list[Record], fraction: float, seed: int) -> tuple[list[Record], list[Record]]:
    """``(train, heldout)``: a seeded ``fraction`` of the records held out (at least one when > 0), file order kept."""
    if fraction <= 0.0 or len(records) < 2:
        return records, []
    size = min(len(records) - 1, max(1, round(fraction * len(records))))
    held = set(random.Random(seed).sample(range(len(records)), size))
    train = [record for index, record in enumerate(records) if index not in held]
    heldout = [record for index, record in enumerate(records) if index in held]
    return train, heldout


def instruction(cfg: FileTaskConfig) -> str:
    """``task.file.instruction``, null resolved: the request for the final answer in the form ``task.file.grader`` reads."""
    return answer_instruction(cfg.grader, cfg.answer_pattern) if cfg.instruction is None else cfg.instruction


def check_config(cfg: FileTaskConfig) -> None:
    """Refuse ``task.file`` settings that cannot make a task, in one line naming the key."""
    if not cfg.train_path:
        raise ConfigError("task.file.train_path", "task.name=file needs a JSONL or Parquet file: task.file.train_path=data/train.jsonl")
    one_of("task.file.grader", cfg.grader, GRADERS)
    one_of("task.file.answer_rule", cfg.answer_rule, ANSWER_RULES)
    in_range("task.file.heldout_fraction", cfg.heldout_fraction, 0.0, 0.9)


@TASKS.register("file", check=lambda cfg: check_config(cfg.file), instruction="task.file.instruction")
def _build(cfg: TaskConfig) -> FileTask:
    return FileTask(cfg.file, cfg.data_seed, on_bad_row=cfg.file.on_bad_row)
