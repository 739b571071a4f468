"""Bring-your-own task: problems from a JSONL or Parquet file, a ``datasets`` folder or a hub dataset, graded by
:mod:`tsctl.tasks.grading`.

The train split is ``task.file.train_path``; the held-out split is ``task.file.heldout_path`` or,
without one, a ``heldout_fraction`` of the train data drawn with the task's data seed. Each path is read by
:func:`tsctl.tasks.hf_datasets.read_data` (a file, a ``save_to_disk`` folder or ``hub:<owner>/<name>:<split>``).
Both keep row order. Every question ends with ``task.file.instruction`` on a new line (by default a request for the final
answer in the form ``task.file.grader`` reads, :func:`instruction`). Worked solutions that do not state a
final answer get an ``"<answer_pattern> <answer>"`` line.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Optional

from tsctl.config.errors import ConfigError
from tsctl.config.ranges import in_range, one_of, positive
from tsctl.config.schema import TaskConfig
from tsctl.tasks.base import Problem, Split
from tsctl.tasks.digests import data_digest
from tsctl.tasks.grading import GRADERS, answer_instruction, ensure_answer_line, response_reward
from tsctl.tasks.hf_datasets import is_hub_id, parse_hub_id, read_data
from tsctl.tasks.records import ANSWER_RULES, BAD_ROW_POLICIES, DataError, Record
from tsctl.tasks.registry import TASKS
from tsctl.tasks.row_size import RowLimit

logger = logging.getLogger(__name__)


class FileTask:
    """A :class:`~tsctl.tasks.base.Task` over problem files (``task.name=file``)."""

    name = "file"

    def __init__(self, cfg: FileTaskSettings, data_seed: int, *, on_bad_row: str = "error") -> None:
        """Read and split the data now, so a data problem surfaces before any training starts.

        Args:
            cfg: the ``task.file`` config.
            data_seed: seed of the held-out split when it is drawn from the train file.
            on_bad_row: ``error`` (stop at a malformed row) or ``skip`` (drop and count it).

        Raises:
            ConfigError: settings :func:`check_config` refuses.
            DataError: a missing file, a malformed row, a row past ``max_row_bytes``, a missing field, or a dataset that
                cannot be loaded.
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
        """The good rows of ``path`` (named by ``task.file.<key>``: a file, a saved dataset or a hub dataset); DataError
        when there are none."""
        cfg = self.cfg
        fields = {"question": cfg.question_field, "answer": cfg.answer_field, "solution": cfg.solution_field}
        records, skipped = read_data(
            path,
            fields,
            on_bad_row,
            answer_rule=cfg.answer_rule,
            optional=("solution",),
            fix=lambda key: f"set task.file.{key}_field=<the field that holds the {key}>",
            skip_key="task.file.on_bad_row",
            path_key=f"task.file.{key}",
            row_limit=RowLimit(cfg.max_row_bytes, "task.file.max_row_bytes"),
        )
        if skipped:
            logger.warning("%s: skipped %d malformed rows (on_bad_row=skip)", path, skipped)
        if not records:
            what = f"all {skipped} of its rows are malformed and were skipped" if skipped else "it is empty or blank"
            raise DataError(f"{path} holds no problem ({what}); point task.file.{key} at a file with one JSON object per line "
                            "(or Parquet rows, or a dataset with rows)")
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


def instruction(cfg: FileTaskSettings) -> str:
    """``task.file.instruction``, null resolved: the request for the final answer in the form ``task.file.grader`` reads."""
    return answer_instruction(cfg.grader, cfg.answer_pattern) if cfg.instruction is None else cfg.instruction



@dataclass
class FileTaskSettings:
    """``task.file.*``: a bring-your-own task, one problem per row of a JSONL or Parquet file or a Hugging Face dataset."""

    train_path: Optional[str] = None
    """The training problems (questions for RL, solutions for warm-up): a JSONL or Parquet file, a folder written by
    ``datasets``' ``save_to_disk`` (of a ``DatasetDict``: its split's sub-folder, ``data/gsm8k/train``), or a hub
    dataset ``hub:<owner>/<name>:<split>`` (``hub:<owner>/<name>/<config>:<split>``). Folders and hub datasets need the
    ``hf-datasets`` extra."""
    heldout_path: Optional[str] = None
    """The held-out problems, in any form train_path takes; when absent, ``heldout_fraction`` of train_path is held out."""
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
    max_row_bytes: int = 1048576
    """The most bytes a row may hold (a JSONL line; a Parquet or dataset row's text columns): a larger row is a
    malformed one, found by its size as the file is read, before it is decoded or tokenized, so that one huge row is
    refused in seconds and in little memory (:mod:`tsctl.tasks.row_size`)."""
    grader: str = "math_verify"
    """How answers are compared: ``exact``, ``numeric`` or ``math_verify``."""
    answer_pattern: str = "Answer:"
    """The final answer is the text after the last occurrence of this marker (or the last \\boxed{})."""
    instruction: Optional[str] = None
    """Text appended to each question on a new line, asking for the final answer in a form the grader reads (a
    model that writes none scores 0 on every response, and ``reward/answer_found`` shows it). Null = by ``grader``:
    ``math_verify`` asks for it ``within \\boxed{}`` (as the benchmarks do), ``numeric`` and ``exact`` for a last line
    ``<answer_pattern> <answer>``; ``''`` adds none (questions that already ask, or a model warmed up on the file)."""

def check_config(cfg: FileTaskSettings) -> None:
    """Refuse ``task.file`` settings that cannot make a task, in one line naming the key."""
    if not cfg.train_path:
        raise ConfigError("task.file.train_path", "task.name=file needs a JSONL or Parquet file, a saved dataset folder or a "
                          "hub dataset: task.file.train_path=data/train.jsonl")
    for key, path in (("train_path", cfg.train_path), ("heldout_path", cfg.heldout_path)):
        if path and is_hub_id(path):
            try:
                parse_hub_id(path)
            except ValueError as error:
                raise ConfigError(f"task.file.{key}", str(error)) from None
    one_of("task.file.grader", cfg.grader, GRADERS)
    one_of("task.file.answer_rule", cfg.answer_rule, ANSWER_RULES)
    in_range("task.file.heldout_fraction", cfg.heldout_fraction, 0.0, 0.9)
    one_of("task.file.on_bad_row", cfg.on_bad_row, BAD_ROW_POLICIES)
    positive("task.file.max_row_bytes", cfg.max_row_bytes)


def content(cfg: TaskConfig, settings: FileTaskSettings) -> dict[str, Any]:
    """What a file task's problems are made of: the digests of its data (:func:`~tsctl.tasks.digests.data_digest`) and
    the settings that shape its rows; neither the paths themselves nor, where a held-out file is given, the held-out
    fraction and the data seed, which it does not read."""
    shaping = {key: value for key, value in asdict(settings).items() if key not in ("train_path", "heldout_path", "heldout_fraction")}
    heldout = ({"heldout": data_digest(settings.heldout_path, "task.file.heldout_path")} if settings.heldout_path
               else {"heldout_fraction": settings.heldout_fraction, "data_seed": cfg.data_seed})
    return {"name": "file", "train": data_digest(str(settings.train_path), "task.file.train_path"), **heldout, **shaping}


@TASKS.register("file", settings=FileTaskSettings, check=lambda cfg, settings: check_config(settings), instruction="task.file.instruction",
                content=content, data_files=True)
def _build(cfg: TaskConfig, settings: FileTaskSettings) -> FileTask:
    return FileTask(settings, cfg.data_seed, on_bad_row=settings.on_bad_row)
