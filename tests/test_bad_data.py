"""The catalogue of bad inputs (see ``tests/catalogue.py``): data that would change a run's numbers without a word.

An empty held-out split, held-out prompts that are train prompts, a column of the wrong type, a data path
that is a folder and a hub dataset while the hub is unreachable are refused before any run folder exists, each with
its fix, which is then applied (a local copy written by ``save_to_disk`` trains as the same rows in JSONL); the
held-out split smaller than the evaluation asks for and prompts repeated within a split are counted in a note.
(The instances of each class, without a run: ``tests/test_data_checks.py``.)
"""

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalogue import passes, refused
from conftest import micro_args, stable_metrics, tsctl
from tsctl.models.builtin import builtin_dir
from tsctl.runconfig import compose_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    """The warmed-up micro model's folder: file tasks start from it (no warm-up of their own)."""
    args = micro_args(tmp_path_factory.mktemp("warm"), model_cache)
    tsctl("warmup", *args)
    return builtin_dir(compose_config(args).cfg)


def on_file(tmp_path: Path, model: Path, data: Path | str, *extra: str) -> list[str]:
    """One training step of a file task over ``data`` into ``tmp_path/runs``, from ``model``."""
    return [*micro_args(tmp_path / "runs", model.parent), f"model.path={model}", "task=file", f"task.file.train_path={data}",
            "trainer.steps=1", "trainer.save_every=1", *extra]


def rows(path: Path, count: int, same: bool = False) -> Path:
    """``count`` problems ``i+1`` (all ``1+1`` when ``same``) as JSONL at ``path``."""
    path.write_text("".join(json.dumps({"question": f"{0 if same else i}+1", "answer": str((0 if same else i) + 1)}) + "\n" for i in range(count)))
    return path


def test_a_file_task_without_held_out_problems_is_refused(tmp_path, model):
    args = on_file(tmp_path, model, rows(tmp_path / "one.jsonl", 1), "name=one")
    refused([tmp_path], "train", *args, words=(
        "the held-out split has no problem, so held-out accuracy would be logged as 0 and pass@1 as NaN",
        "reads task.file.heldout_path=<file>", "or set trainer.eval_every=0 to train without held-out evaluation",
    ))
    passes("train", *args, "trainer.eval_every=0", words=("run complete",))
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"question": "5+5", "answer": "10"}) + "\n")  # one held-out problem of its own
    out = passes("train", *args[:-1], f"task.file.heldout_path={other}", "name=with-heldout", words=("run complete",))
    assert "note: the held-out split has 1 problem(s), fewer than the 16 trainer.eval_problems asks for: held-out accuracy moves in steps of 1/1" in out


def test_held_out_prompts_that_are_train_prompts_are_refused_unless_allowed(tmp_path, model):
    args = on_file(tmp_path, model, rows(tmp_path / "copies.jsonl", 300, same=True), "name=copies")
    refused([tmp_path], "train", *args, words=(
        "30 of the 30 held-out prompts are also train prompts (the same question text)", "or accept it with task.heldout_overlap=allow",
    ))
    out = passes("train", *args, "task.heldout_overlap=allow", words=("run complete",))
    assert "note: 30 of the 30 held-out prompts are also train prompts (task.heldout_overlap=allow)" in out
    assert "note: the train split repeats prompts: 269 of its 270 repeat an earlier one (1 distinct)" in out


def test_a_column_of_the_wrong_type_is_named_not_coerced(tmp_path, model):
    data = tmp_path / "typed.parquet"
    table = [{"question": 2 + i, "answer": str(3 + i)} for i in range(20)]
    pq.write_table(pa.Table.from_pylist(table), data)
    args = on_file(tmp_path, model, data, "name=typed")
    refused([tmp_path], "train", *args, words=(f"{data} row 1: column 'question': holds an integer (2), expected text; store it as a string",))
    pq.write_table(pa.Table.from_pylist([{**row, "question": f"{row['question']}+1"} for row in table]), data)  # stored as text
    passes("train", *args, words=("run complete",))


def test_a_data_path_that_is_a_folder_is_named_as_one(tmp_path, model):
    folder = tmp_path / "data"
    folder.mkdir()
    refused([tmp_path], "train", *on_file(tmp_path, model, folder), words=(f"{folder} is a folder, not a data file; point task.file.train_path at",))
    passes("train", *on_file(tmp_path, model, rows(folder / "train.jsonl", 20)), words=("run complete",))


def test_a_hub_dataset_offline_is_refused_and_its_saved_copy_trains_as_the_same_rows_in_jsonl(tmp_path, model):
    hub, offline = "hub:owner/sums:train", {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    refused([tmp_path], "train", *on_file(tmp_path, model, hub), words=(
        f"task.file.train_path={hub}: the Hugging Face hub is unreachable (or HF_HUB_OFFLINE is set)",
        "save_to_disk('data-train')", "then set task.file.train_path to that copy"), **offline)
    file = rows(tmp_path / "sums.jsonl", 20)
    copy = tmp_path / "sums"
    datasets.Dataset.from_list([json.loads(line) for line in file.read_text().splitlines()]).save_to_disk(str(copy))
    passes("train", *on_file(tmp_path, model, copy, "name=saved"), words=("run complete",), **offline)
    passes("train", *on_file(tmp_path, model, file, "name=jsonl"), words=("run complete",))
    saved, jsonl = (stable_metrics(tmp_path / "runs" / "default" / name) for name in ("saved", "jsonl"))
    assert [record["step"] for record in saved] == [0, 1] and saved == jsonl
