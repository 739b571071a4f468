"""Reading problem files: field mapping, answer rules, bad-input errors, and the file-backed task."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tsctl.config.errors import ConfigError
from tsctl.tasks.file_task import FileTask, FileTaskSettings
from tsctl.tasks.records import DataError, gold_answer, read_records

FIELDS = {"question": "question", "answer": "answer"}


def write_jsonl(path: Path, rows: list[object], raw_lines: dict[int, str] | None = None) -> Path:
    """Write rows as JSON lines; ``raw_lines`` replaces given 1-based lines with raw text."""
    lines = [json.dumps(row) for row in rows]
    for number, text in (raw_lines or {}).items():
        lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def problems(count: int) -> list[dict]:
    return [{"question": f"{i} + 1 = ?", "answer": str(i + 1), "solution": f"{i} + 1 = {i + 1}"} for i in range(count)]


def test_reads_and_maps_fields(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"problem": "Q", "final": 27.0, "extra": 1}])
    records, skipped = read_records(path, {"question": "problem", "answer": "final", "solution": None})
    assert skipped == 0
    assert records[0].line == 1
    assert records[0].values == {"question": "Q", "answer": "27", "solution": None}


def test_blank_lines_are_ignored_and_lines_keep_their_numbers(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('\n{"question": "a", "answer": "1"}\n\n{"question": "b", "answer": "2"}\n')
    records, _ = read_records(path, FIELDS)
    assert [record.line for record in records] == [2, 4]


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found: .*nope.jsonl"):
        read_records(tmp_path / "nope.jsonl", FIELDS)


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", problems(3), raw_lines={2: '{"question": "x", '})
    with pytest.raises(DataError) as error:
        read_records(path, FIELDS)
    message = str(error.value)
    assert "d.jsonl line 2" in message and "malformed JSON" in message


def test_missing_field_names_file_line_field_and_fix(tmp_path: Path) -> None:
    rows = problems(3)
    rows[2] = {"problem": "Q", "answer": "1"}
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataError) as error:
        read_records(path, FIELDS, fix=lambda key: f"set task.file.{key}_field=<field>")
    message = str(error.value)
    assert "d.jsonl line 3" in message
    assert "'question'" in message and "['answer', 'problem']" in message
    assert "set task.file.question_field=<field>" in message
    assert "on_bad_row=skip" in message


def test_non_object_line_is_a_bad_row(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [["a", "b"]])
    with pytest.raises(DataError, match="line 1: expected a JSON object"):
        read_records(path, FIELDS)


def test_skip_mode_counts_bad_rows(tmp_path: Path) -> None:
    rows = problems(5)
    rows[1] = {"question": "no answer"}
    rows[3] = {"question": "null answer", "answer": None}
    path = write_jsonl(tmp_path / "d.jsonl", rows, raw_lines={5: "not json"})
    records, skipped = read_records(path, FIELDS, on_bad_row="skip")
    assert skipped == 3
    assert [record.line for record in records] == [1, 3]


def test_optional_fields_may_be_absent(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": "1"}])
    records, _ = read_records(path, {**FIELDS, "solution": "solution"}, optional=("solution",))
    assert records[0].values["solution"] is None


def test_unknown_suffix_and_policy_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("question,answer\n")
    with pytest.raises(DataError, match="cannot tell the format"):
        read_records(path, FIELDS)
    with pytest.raises(ValueError, match="on_bad_row"):
        read_records(write_jsonl(tmp_path / "d.jsonl", problems(1)), FIELDS, on_bad_row="ignore")


@pytest.mark.parametrize(
    ("value", "rule", "expected"),
    [
        (" 42 ", "field", "42"),
        (27.0, "field", "27"),
        (2.5, "field", "2.5"),
        ("so $x = \\boxed{\\frac{1}{2}}$ and \\boxed{4.5e33}", "boxed", "4.5e33"),
        ("3 + 4 = <<3+4=7>>7\n#### 7", "after_hashes", "7"),
        (["2"], "list_first", "2"),
        ("['2']", "list_first", "2"),
        (["$\\frac{1}{2 n+2}$"], "list_first", "\\frac{1}{2 n+2}"),
        (["$69$,$84$"], "list_first", "69, 84"),
        (["$(-\\infty, 0) \\cup\\{1\\}$."], "list_first", "(-\\infty, 0) \\cup\\{1\\}"),
    ],
)
def test_answer_rules(value: object, rule: str, expected: str) -> None:
    assert gold_answer(value, rule) == expected


@pytest.mark.parametrize(("value", "rule"), [("no box", "boxed"), ("no hashes", "after_hashes"), ([], "list_first")])
def test_answer_rule_without_answer_is_a_bad_row(tmp_path: Path, value: object, rule: str) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": value}])
    with pytest.raises(DataError, match=f"line 1: field 'answer': .*{rule}"):
        read_records(path, FIELDS, answer_rule=rule)
    assert read_records(path, FIELDS, on_bad_row="skip", answer_rule=rule) == ([], 1)


def test_parquet_rows_are_numbered_from_one(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "q1", "answer": 1}, {"question": "q2", "answer": None}]), path)
    with pytest.raises(DataError, match="d.parquet row 2: missing field 'answer'"):
        read_records(path, FIELDS)
    records, skipped = read_records(path, FIELDS, on_bad_row="skip")
    assert (len(records), skipped, records[0].values["answer"]) == (1, 1, "1")


def test_file_task_from_jsonl_splits_deterministically(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "train.jsonl", problems(20))
    cfg = FileTaskSettings(train_path=str(path), heldout_fraction=0.25)
    task = FileTask(cfg, data_seed=7)
    train, heldout = task.problems("train"), task.problems("heldout")
    assert (len(train), len(heldout)) == (15, 5)
    assert {p.id for p in train}.isdisjoint({p.id for p in heldout})
    assert [p.id for p in heldout] == [p.id for p in FileTask(cfg, data_seed=7).problems("heldout")]
    assert [p.id for p in heldout] != [p.id for p in FileTask(cfg, data_seed=8).problems("heldout")]
    problem = train[0]
    assert problem.solution is not None and problem.solution.endswith(f"\nAnswer: {problem.answer}")
    assert task.answer_marker == "Answer:"
    assert task.reward(problem, f"thinking...\nAnswer: {problem.answer}") == 1.0
    assert task.reward(problem, f"\\boxed{{{problem.answer}.0}}") == 1.0
    assert task.reward(problem, "Answer: -1") == 0.0
    assert task.reward(problem, "\\boxed{" * 1000) == 0.0


def test_file_task_from_parquet_with_heldout_file(tmp_path: Path) -> None:
    for name, count in (("train", 6), ("heldout", 3)):
        rows = [{"problem": f"q{i}", "ans": f"{i}/2"} for i in range(count)]
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / f"{name}.parquet")
    cfg = FileTaskSettings(
        train_path=str(tmp_path / "train.parquet"),
        heldout_path=str(tmp_path / "heldout.parquet"),
        question_field="problem",
        answer_field="ans",
        solution_field=None,
        grader="numeric",
    )
    task = FileTask(cfg, data_seed=0)
    assert [len(task.problems(split)) for split in ("train", "heldout")] == [6, 3]
    problem = task.problems("heldout")[1]
    ask = 'Please reason step by step, and end your response with a line "Answer: <final answer>".'  # the numeric grader's form
    assert (problem.id, problem.question, problem.answer, problem.solution) == ("file-heldout-2", f"q1\n{ask}", "1/2", None)
    assert task.reward(problem, "Answer: 0.5") == 1.0


def test_file_task_errors_name_the_config_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="task.file.train_path"):
        FileTask(FileTaskSettings(), data_seed=0)
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "q", "answer": "1"}])
    with pytest.raises(DataError, match="line 1: .*set task.file.question_field="):
        FileTask(FileTaskSettings(train_path=str(path)), data_seed=0)
    with pytest.raises(ValueError, match="grader"):
        FileTask(FileTaskSettings(train_path=str(path), grader="fuzzy"), data_seed=0)


def test_file_task_skip_mode_counts(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", problems(10), raw_lines={4: "{"})
    task = FileTask(FileTaskSettings(train_path=str(path), heldout_fraction=0.0), data_seed=0, on_bad_row="skip")
    assert (len(task.problems("train")), len(task.problems("heldout")), task.skipped) == (9, 0, 1)
