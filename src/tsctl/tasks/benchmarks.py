"""Evaluation benchmarks: where a test set lives, how its rows map to problems, how answers are graded.

One YAML per benchmark under ``conf/benchmark/`` holds the fields of :class:`BenchmarkConfig`;
:func:`load_benchmark_config` reads it by name (``math500``) or path, :func:`load_benchmark` returns
its problems and :func:`benchmark_task` wraps them as a task whose reward uses :mod:`grading`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import OmegaConf

from tsctl.config.store import conf_dir
from tsctl.tasks.base import Problem, Split
from tsctl.tasks.grading import BOXED_INSTRUCTION, GRADERS, ensure_answer_line, response_reward
from tsctl.tasks.hf_datasets import load_hub_dataset
from tsctl.tasks.records import ANSWER_RULES, FORMATS, DataError, Record, map_rows, read_records


@dataclass
class BenchmarkConfig:
    """One benchmark: its data, its field mapping and its grader."""

    name: str
    """Short name, used in problem ids and result tables."""
    path: Optional[str] = None
    """JSONL or Parquet file; relative paths are tried from the working directory, then from the
    project root (so ``../shared/data/benchmarks/...`` works from a checkout). Null with hf_dataset."""
    format: str = "auto"
    """``auto`` (by suffix), ``jsonl`` or ``parquet``."""
    hf_dataset: Optional[str] = None
    """Hugging Face dataset id, read with the ``datasets`` package (the ``hf-datasets`` extra) when ``path`` is null."""
    hf_config: Optional[str] = None
    """Configuration (subset) name of the Hugging Face dataset."""
    split: str = "test"
    """Split of the Hugging Face dataset."""
    question_field: str = "problem"
    """Field holding the question text."""
    answer_field: str = "answer"
    """Field holding the gold answer (read with answer_rule)."""
    answer_rule: str = "field"
    """``field``, ``boxed`` (last \\boxed{} of the field), ``after_hashes`` (after the last ####) or ``list_first``."""
    solution_field: Optional[str] = None
    """Field holding a reference solution, when the benchmark has one."""
    solution_rule: str = "field"
    """``field`` (the solution is text) or ``list_first`` (a list of reference solutions: the first)."""
    grader: str = "math_verify"
    """``math_verify``, ``numeric`` or ``exact``."""
    instruction: str = BOXED_INSTRUCTION
    """Text appended to each question on a new line; empty for none."""
    answer_marker: Optional[str] = "Answer:"
    """A response's answer is its last \\boxed{}, else after its last ####, else after this marker."""


SOLUTION_RULES = ("field", "list_first")
"""How a benchmark's solution field is read (``BenchmarkConfig.solution_rule``)."""


def available_benchmarks() -> list[str]:
    """Names of the benchmark YAMLs in :func:`conf_dir`."""
    return sorted(path.stem for path in (conf_dir() / "benchmark").glob("*.yaml"))


def load_benchmark_config(name_or_path: str) -> BenchmarkConfig:
    """Read and validate a benchmark YAML, by name (``conf/benchmark/<name>.yaml``) or by file path.

    Raises:
        ValueError: an unknown name, unknown keys, wrong types or invalid values.
    """
    path = Path(name_or_path)
    if not path.is_file():
        path = conf_dir() / "benchmark" / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ValueError(
            f"unknown benchmark {name_or_path!r}: not a file and not one of {', '.join(available_benchmarks())}"
        )
    try:
        merged = OmegaConf.merge(OmegaConf.structured(BenchmarkConfig), OmegaConf.load(path))
        cfg = OmegaConf.to_object(merged)
    except Exception as error:  # noqa: BLE001 - OmegaConf raises several types for a bad YAML
        raise ValueError(f"invalid benchmark config {path}: {error}") from error
    validate_benchmark_config(cfg)
    return cfg


def validate_benchmark_config(cfg: BenchmarkConfig) -> None:
    """Raise ValueError naming the first invalid field of a benchmark config."""
    choices = {"format": FORMATS, "answer_rule": ANSWER_RULES, "solution_rule": SOLUTION_RULES, "grader": GRADERS}
    for key, allowed in choices.items():
        if getattr(cfg, key) not in allowed:
            raise ValueError(f"benchmark {cfg.name}: {key}={getattr(cfg, key)!r}: choose one of {', '.join(allowed)}")
    if (cfg.path is None) == (cfg.hf_dataset is None):
        raise ValueError(f"benchmark {cfg.name}: set exactly one of path and hf_dataset")


def resolve_path(path: str) -> Path:
    """An absolute path as is; a relative one from the working directory, else from the project root.

    Raises:
        DataError: when the file is in neither place (the message names every place tried).
    """
    candidate = Path(path).expanduser()
    tried = [candidate] if candidate.is_absolute() else [Path.cwd() / candidate, conf_dir().parent / candidate]
    for option in tried:
        if option.is_file():
            return option
    raise DataError(f"benchmark data not found: {path} (tried {', '.join(str(t.resolve()) for t in tried)})")


def load_benchmark(
    cfg: BenchmarkConfig, limit: int | None = None, on_bad_row: str = "error"
) -> tuple[list[Problem], int]:
    """The problems of a benchmark, in file order.

    Args:
        cfg: the benchmark.
        limit: keep only the first ``limit`` problems; None keeps all.
        on_bad_row: ``error`` stops at a malformed row (naming file, line and field); ``skip`` counts it.

    Returns:
        ``(problems, skipped)``.

    Raises:
        DataError: a missing file, a malformed row or a missing field; an hf_dataset that cannot be loaded (the hub
            unreachable, ``datasets`` not installed).
    """
    validate_benchmark_config(cfg)
    fields = {"question": cfg.question_field, "answer": cfg.answer_field, "solution": cfg.solution_field}
    options = dict(
        answer_rule=cfg.answer_rule,
        optional=("solution",),
        fix=lambda key: f"set {key}_field in the {cfg.name} benchmark config to the field that holds the {key}",
        skip_key="eval.on_bad_row",
        first_of=("solution",) if cfg.solution_rule == "list_first" else (),
    )
    if cfg.path is not None:
        records, skipped = read_records(resolve_path(cfg.path), fields, on_bad_row, file_format=cfg.format,
                                        format_key=f"format: jsonl or parquet in the {cfg.name} benchmark config", **options)
    else:
        rows = enumerate(_hf_rows(cfg), start=1)
        records, skipped = map_rows(rows, f"{cfg.hf_dataset} ({cfg.split}) row", fields, on_bad_row, **options)
    if limit is not None:
        records = records[:limit]
    return [_problem(cfg, record) for record in records], skipped


def _hf_rows(cfg: BenchmarkConfig) -> Sequence[dict]:
    label = f"benchmark {cfg.name} ({cfg.hf_dataset}, {cfg.split})"
    return load_hub_dataset(cfg.hf_dataset, cfg.hf_config, cfg.split, label, f"path in the {cfg.name} benchmark config", folders=False)


def _problem(cfg: BenchmarkConfig, record: Record) -> Problem:
    question = record.values["question"] or ""
    if cfg.instruction:
        question = f"{question}\n{cfg.instruction}"
    answer = record.values["answer"] or ""
    return Problem(
        id=f"{cfg.name}-{record.line}",
        question=question,
        answer=answer,
        solution=ensure_answer_line(record.values["solution"], answer, cfg.answer_marker),
    )


class BenchmarkTask:
    """A benchmark as a task: one evaluation-only split (``heldout``) and a grading reward."""

    def __init__(self, cfg: BenchmarkConfig, problems: Sequence[Problem], skipped: int = 0) -> None:
        """Wrap loaded problems (see :func:`load_benchmark`) with the benchmark's grader."""
        self.cfg = cfg
        self.name = cfg.name
        self.answer_marker = cfg.answer_marker
        self.skipped = skipped
        """Bad rows dropped while loading (``on_bad_row=skip``)."""
        self._problems = list(problems)

    def problems(self, split: Split) -> Sequence[Problem]:
        """All problems of the benchmark for ``heldout``; benchmarks have no train split."""
        if split != "heldout":
            raise ValueError(f"benchmark {self.name} is for evaluation only: it has no {split!r} split")
        return self._problems

    def reward(self, problem: Problem, response: str) -> float:
        """1.0 when the response's final answer matches the gold answer under the benchmark's grader, else 0.0."""
        return response_reward(response, problem.answer, self.answer_marker, self.cfg.grader)


def benchmark_task(
    name_or_cfg: str | BenchmarkConfig, limit: int | None = None, on_bad_row: str = "error"
) -> BenchmarkTask:
    """Load a benchmark (by name, YAML path or config) as a :class:`BenchmarkTask`."""
    cfg = name_or_cfg if isinstance(name_or_cfg, BenchmarkConfig) else load_benchmark_config(name_or_cfg)
    problems, skipped = load_benchmark(cfg, limit, on_bad_row)
    return BenchmarkTask(cfg, problems, skipped)
