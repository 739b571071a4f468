"""Data that would change results, without a run: each instance of the classes ``tests/test_bad_data.py`` runs.

- A field of the wrong type is named with its type and the expected one, never converted (a number is an
  answer's only other form: benchmarks store numeric answers so).
- The held-out split: empty (where scored), smaller than the evaluation asks for, or sharing prompts with
  the train split; prompts repeated within a split.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tsctl.tasks.base import Problem
from tsctl.tasks.records import DataError, read_records
from tsctl.tasks.split_checks import check_splits

FIELDS = {"question": "question", "answer": "answer", "solution": "solution"}


def one_row(tmp_path: Path, row: dict, suffix: str) -> Path:
    path = tmp_path / f"d{suffix}"
    if suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist([row]), path)
    else:
        path.write_text(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
@pytest.mark.parametrize(
    "row, rule, words",
    [
        ({"question": 7, "answer": "2"}, "field", "'question': holds an integer (7), expected text; store it as a string"),
        ({"question": "q", "answer": "2", "solution": 1.5}, "field", "'solution': holds a float (1.5), expected text"),
        ({"question": "q", "answer": ["2"]}, "field", "'answer': holds a list (['2']), expected text or a number; answer_rule=list_first reads a list's first item"),
        ({"question": {"text": "q"}, "answer": "2"}, "field", "'question': holds an object ({'text': 'q'}), expected text"),
        ({"question": "q", "answer": True}, "field", "'answer': holds a boolean (True), expected text or a number"),
        ({"question": "q", "answer": "x", "solution": ["a", "b"]}, "field", "'solution': holds a list (['a', 'b']), expected text"),
        ({"question": "q", "answer": 5}, "list_first", "'answer': holds an integer (5), expected a list (answer_rule=list_first) or its text"),
    ],
    ids=["int-question", "float-solution", "list-answer", "object-question", "bool-answer", "list-solution", "number-for-list-rule"],
)
def test_a_field_of_the_wrong_type_is_named_with_its_type(tmp_path, suffix, row, rule, words):
    path = one_row(tmp_path, row, suffix)
    with pytest.raises(DataError) as err:
        read_records(path, FIELDS, answer_rule=rule, optional=("solution",))
    column = "column" if suffix == ".parquet" else "field"
    assert f"{path} {'row' if suffix == '.parquet' else 'line'} 1: {column} {words}" in str(err.value)


@pytest.mark.parametrize("answer, rule, text", [(27.0, "field", "27"), (0.5, "field", "0.5"), (-3, "field", "-3"), ([4], "list_first", "4"), ("['2']", "list_first", "2")])
def test_a_numeric_answer_is_its_text(tmp_path, answer, rule, text):
    records, _ = read_records(one_row(tmp_path, {"question": "q", "answer": answer}, ".jsonl"), FIELDS, answer_rule=rule, optional=("solution",))
    assert records[0].values["answer"] == text


def problems(*questions: str) -> list[Problem]:
    return [Problem(id=str(i), question=q, answer="1") for i, q in enumerate(questions)]


def test_an_empty_held_out_split_is_refused_only_where_it_is_scored():
    with pytest.raises(DataError, match="the held-out split has no problem.*or set trainer.eval_every=0"):
        check_splits(problems("a"), [], scored=16, overlap="error")
    assert check_splits(problems("a"), [], scored=0, overlap="error") == []


def test_a_small_held_out_split_and_repeated_prompts_are_counted():
    notes = check_splits(problems("a", "b", "a", " a "), problems("c", "d", "d"), scored=16, overlap="error")
    assert notes == [
        "the held-out split has 3 problem(s), fewer than the 16 trainer.eval_problems asks for: held-out accuracy moves in steps of 1/3",
        "the train split repeats prompts: 2 of its 4 repeat an earlier one (2 distinct)",
        "the held-out split repeats prompts: 1 of its 3 repeat an earlier one (2 distinct)",
    ]


def test_held_out_prompts_that_are_train_prompts_are_refused_unless_allowed():
    train, heldout = problems("a", "b"), problems("b ", "c", "a")
    with pytest.raises(DataError, match="2 of the 3 held-out prompts are also train prompts .* task.heldout_overlap=allow"):
        check_splits(train, heldout, scored=1, overlap="error")
    assert check_splits(train, heldout, scored=1, overlap="allow") == ["2 of the 3 held-out prompts are also train prompts (task.heldout_overlap=allow)"]


def test_the_final_evaluation_refuses_an_empty_held_out_split():
    from tsctl.evaluation.scoring import final_eval
    from tsctl.runconfig import compose_config

    class NoHeldOut:
        def problems(self, split):
            return problems("a") if split == "train" else []

    with pytest.raises(DataError, match="no problem to evaluate the final checkpoint on"):
        final_eval(None, None, NoHeldOut(), compose_config([]).cfg, 3)
