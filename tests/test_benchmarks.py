"""Benchmark configs and loading, checked against the real benchmark files in ../shared/data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tsctl.tasks import grading
from tsctl.tasks.benchmarks import (
    BenchmarkConfig,
    available_benchmarks,
    benchmark_task,
    load_benchmark,
    load_benchmark_config,
    resolve_path,
)
from tsctl.tasks.hf_datasets import INSTALL
from tsctl.tasks.records import DataError

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "benchmarks"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"shared benchmark data not found at {DATA}")

SIZES = {"math500": 500, "aime24": 30, "amc23": 40, "minerva_math": 272, "olympiadbench": 675, "gsm8k": 1319}


def test_every_benchmark_has_a_valid_config() -> None:
    assert available_benchmarks() == sorted(SIZES)
    for name in SIZES:
        cfg = load_benchmark_config(name)
        assert cfg.name == name
        assert cfg.path == f"../shared/data/benchmarks/{name}/test.jsonl"


def test_bad_configs_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown benchmark 'nope'.*math500"):
        load_benchmark_config("nope")
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: x\npath: x.jsonl\nquestion_feild: q\n")
    with pytest.raises(ValueError, match="question_feild"):
        load_benchmark_config(str(typo))
    bad_grader = tmp_path / "grader.yaml"
    bad_grader.write_text("name: x\npath: x.jsonl\ngrader: fuzzy\n")
    with pytest.raises(ValueError, match="grader='fuzzy'"):
        load_benchmark_config(str(bad_grader))
    with pytest.raises(ValueError, match="exactly one of path and hf_dataset"):
        load_benchmark(BenchmarkConfig(name="x"))


def test_custom_benchmark_yaml_and_its_errors(tmp_path: Path) -> None:
    data = tmp_path / "mine.jsonl"
    rows = [{"q": "1+1?", "a": "2"}, {"q": "2+2?"}, {"q": "3+3?", "a": "6"}]
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    yaml = tmp_path / "mine.yaml"
    yaml.write_text(f"name: mine\npath: {data}\nquestion_field: q\nanswer_field: a\ninstruction: ''\n")
    cfg = load_benchmark_config(str(yaml))
    with pytest.raises(DataError) as error:
        load_benchmark(cfg)
    message = str(error.value)
    assert f"{data} line 2" in message and "'a'" in message
    assert "set answer_field in the mine benchmark config" in message
    problems, skipped = load_benchmark(cfg, on_bad_row="skip")
    assert skipped == 1
    assert [(p.id, p.question, p.answer) for p in problems] == [("mine-1", "1+1?", "2"), ("mine-3", "3+3?", "6")]


def test_missing_benchmark_file_names_every_place_tried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=f"not found: missing/x.jsonl \\(tried {tmp_path}/missing/x.jsonl, "):
        load_benchmark(BenchmarkConfig(name="x", path="missing/x.jsonl"))


def test_hf_dataset_needs_the_datasets_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets now fails
    with pytest.raises(DataError) as error:
        load_benchmark(BenchmarkConfig(name="hf", hf_dataset="HuggingFaceH4/MATH-500"))
    assert str(error.value) == f"benchmark hf (HuggingFaceH4/MATH-500, test) is a Hugging Face hub dataset, which needs the datasets package: {INSTALL}"


@needs_data
def test_relative_paths_resolve_from_the_project_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_path("../shared/data/benchmarks/math500/test.jsonl").samefile(DATA / "math500" / "test.jsonl")
    assert resolve_path(str(DATA / "gsm8k" / "test.jsonl")) == DATA / "gsm8k" / "test.jsonl"


@needs_data
@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_benchmark_loads_completely(name: str) -> None:
    task = benchmark_task(name)
    problems = task.problems("heldout")
    assert (len(problems), task.skipped) == (SIZES[name], 0)
    assert all(p.question.endswith(grading_instruction()) and p.answer for p in problems)
    assert len({p.id for p in problems}) == len(problems)
    with pytest.raises(ValueError, match="evaluation only"):
        task.problems("train")


def grading_instruction() -> str:
    return "\nPlease reason step by step, and put your final answer within \\boxed{}."


@needs_data
@pytest.mark.parametrize(
    ("name", "min_rate"),
    [("math500", 0.98), ("gsm8k", 0.98), ("minerva_math", 0.98), ("aime24", 0.9), ("olympiadbench", 0.98)],
)
def test_reference_solutions_grade_as_correct(name: str, min_rate: float) -> None:
    """A benchmark's own worked solutions must grade as correct; far below 100% means mis-parsing.

    OlympiadBench's solutions state no boxed answer, so they pass only through the answer line
    that loading appends (``Answer: <gold>``); the others are graded from their own text.
    """
    task = benchmark_task(name)
    problems = [p for p in task.problems("heldout") if p.solution]
    assert len(problems) == SIZES[name]
    rate = sum(task.reward(p, p.solution) for p in problems) / len(problems)
    assert rate >= min_rate


@needs_data
def test_symbolic_path_parses_math500_gold_answers() -> None:
    """Each sampled MATH-500 boxed answer is equal to its gold answer by math-verify alone."""
    problems, _ = load_benchmark(load_benchmark_config("math500"))
    sample = problems[::5]
    agree = sum(grading._math_verify(grading.last_boxed(p.solution), p.answer, 1) for p in sample)
    assert agree >= 0.98 * len(sample)


@needs_data
def test_benchmark_rewards_grade_boxed_responses() -> None:
    amc = benchmark_task("amc23", limit=1)
    problem = amc.problems("heldout")[0]
    assert problem.answer == "27"
    assert amc.reward(problem, "They meet after 1.5 hours, so \\boxed{27} miles.") == 1.0
    assert amc.reward(problem, "Answer: 27.0") == 1.0
    assert amc.reward(problem, "\\boxed{28}") == 0.0
    gsm = benchmark_task("gsm8k", limit=3)
    assert len(gsm.problems("heldout")) == 3
    assert gsm.reward(gsm.problems("heldout")[0], "She makes $18.\n#### 18") == 1.0
