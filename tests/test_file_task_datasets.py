"""A file task's data from Hugging Face datasets (``tsctl.tasks.hf_datasets``): a folder ``save_to_disk`` wrote gives
the problems the same rows give in a JSONL file, under the same field mapping and ``on_bad_row``; a ``DatasetDict``'s
folder needs one split named; a hub id is parsed, loaded with its configuration and split, and offline refused in
one line that says how to use a local copy. (A run over a saved dataset, end to end: ``tests/test_bad_data.py``.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest

from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config
from tsctl.tasks.file_task import FileTask, FileTaskSettings
from tsctl.tasks.hf_datasets import HUB_FORM, INSTALL, HubId, parse_hub_id
from tsctl.tasks.records import DataError

ROWS = [{"problem": f"{i}+{i}", "gold": str(2 * i), "worked": f"{i}+{i}={2 * i}"} for i in range(8)]
BAD = [{**row, "problem": None} if i == 2 else row for i, row in enumerate(ROWS)]
"""Row 3 has no question."""


def saved(folder: Path, rows: list[dict]) -> Path:
    """``rows`` as a dataset ``save_to_disk`` wrote in ``folder``."""
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    return folder


def jsonl(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a JSONL file at ``path``."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def task(train: Path | str, heldout: Path | str | None = None, on_bad_row: str = "error") -> FileTask:
    """A file task over ``train`` (and ``heldout``) with the fields of :data:`ROWS` mapped, a quarter held out."""
    cfg = FileTaskSettings(train_path=str(train), heldout_path=heldout and str(heldout), heldout_fraction=0.25,
                           question_field="problem", answer_field="gold", solution_field="worked", on_bad_row=on_bad_row)
    return FileTask(cfg, data_seed=7, on_bad_row=on_bad_row)


def view(file_task: FileTask, split: str) -> list[tuple[str, str, str, str | None]]:
    return [(p.id, p.question, p.answer, p.solution) for p in file_task.problems(split)]


def test_a_saved_dataset_gives_the_problems_of_the_same_rows_in_jsonl(tmp_path):
    from_folder = task(saved(tmp_path / "data", BAD), on_bad_row="skip")
    from_file = task(jsonl(tmp_path / "data.jsonl", BAD), on_bad_row="skip")
    assert view(from_folder, "train") == view(from_file, "train") and view(from_folder, "heldout") == view(from_file, "heldout")
    assert from_folder.skipped == from_file.skipped == 1
    problems = [*from_folder.problems("train"), *from_folder.problems("heldout")]
    assert len(from_folder.problems("heldout")) == 2 and len(problems) == 7
    assert sorted(int(p.id.rsplit("-", 1)[1]) for p in problems) == [1, 2, 4, 5, 6, 7, 8]  # row numbers, row 3 skipped
    first = next(p for p in problems if p.id.endswith("-1"))
    assert (first.question.splitlines()[0], first.answer, first.solution) == ("0+0", "0", "0+0=0\nAnswer: 0")


def test_a_bad_row_of_a_saved_dataset_stops_it_as_it_stops_a_jsonl_file(tmp_path):
    folder, file = saved(tmp_path / "data", BAD), jsonl(tmp_path / "data.jsonl", BAD)
    with pytest.raises(DataError) as from_folder:
        task(folder)
    with pytest.raises(DataError) as from_file:
        task(file)
    assert str(from_folder.value).startswith(f"{folder} row 3: missing field 'problem' (for the question)")
    assert str(from_folder.value) == str(from_file.value).replace(f"{file} line 3", f"{folder} row 3")
    assert "(or set task.file.on_bad_row=skip to skip such rows)" in str(from_folder.value)


def test_a_held_out_path_may_be_a_saved_dataset(tmp_path):
    file_task = task(jsonl(tmp_path / "train.jsonl", ROWS), saved(tmp_path / "heldout", ROWS[5:]))
    assert [(p.id, p.answer) for p in file_task.problems("heldout")] == [("file-heldout-1", "10"), ("file-heldout-2", "12"), ("file-heldout-3", "14")]
    assert len(file_task.problems("train")) == 8


def test_a_dataset_of_several_splits_needs_one_named(tmp_path):
    root = tmp_path / "splits"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:6]), "test": datasets.Dataset.from_list(ROWS[6:])}).save_to_disk(str(root))
    with pytest.raises(DataError) as whole:
        task(root)
    assert str(whole.value) == (f"the saved dataset {root} holds several splits (its splits: train, test); point task.file.train_path "
                                f"at one of them, e.g. task.file.train_path={root}/train")
    with pytest.raises(DataError, match=r"the saved dataset .* has no split 'validation' \(its splits: train, test\); point task.file.heldout_path at one"):
        task(root / "train", root / "validation")
    file_task = task(root / "train", root / "test")
    assert [p.answer for p in file_task.problems("train")] == ["0", "2", "4", "6", "8", "10"]
    assert [p.answer for p in file_task.problems("heldout")] == ["12", "14"]


def test_a_hub_id_loads_its_configuration_and_split(tmp_path, monkeypatch):
    calls = []

    def load_dataset(repo, config, split):
        calls.append((repo, config, split))
        return datasets.Dataset.from_list(ROWS[:5] if split == "train" else ROWS[5:])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    file_task = task("hub:owner/maths/main:train", "hub:owner/maths:test")
    assert calls == [("owner/maths", "main", "train"), ("owner/maths", None, "test")]
    assert [p.answer for p in file_task.problems("train")] == ["0", "2", "4", "6", "8"]
    assert [p.id for p in file_task.problems("heldout")] == ["file-heldout-1", "file-heldout-2", "file-heldout-3"]


OFFLINE_LOADS = {
    "file task": ("from tsctl.tasks.file_task import FileTask, FileTaskSettings\n"
                  "FileTask(FileTaskSettings(train_path='hub:openai/gsm8k/main:train'), 0)"),
    "benchmark": ("from tsctl.tasks.benchmarks import BenchmarkConfig, load_benchmark\n"
                  "load_benchmark(BenchmarkConfig(name='gsm8k', hf_dataset='openai/gsm8k', hf_config='main'))"),
}
"""Python that loads ``openai/gsm8k``'s ``main`` configuration from the hub, as each reader of hub datasets does."""


@pytest.mark.parametrize("reader, label, save", [
    ("file task", "task.file.train_path=hub:openai/gsm8k/main:train",
     "datasets.load_dataset('openai/gsm8k', 'main', split='train').save_to_disk('data-train')\" (or .to_parquet('train.parquet')), "
     "copy it here, then set task.file.train_path to that copy"),
    ("benchmark", "benchmark gsm8k (openai/gsm8k, test)",
     "datasets.load_dataset('openai/gsm8k', 'main', split='test').to_parquet('test.parquet')\", "
     "copy it here, then set path in the gsm8k benchmark config to that copy"),
])
def test_a_hub_dataset_offline_is_one_line_on_saving_a_local_copy(tmp_path, reader, label, save):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}  # an empty cache
    proc = subprocess.run([sys.executable, "-c", OFFLINE_LOADS[reader]], capture_output=True, text=True, env=env, timeout=120)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last == (
        f"tsctl.tasks.records.DataError: {label}: the Hugging Face hub is unreachable (or HF_HUB_OFFLINE is set) and the "
        f"dataset is not in the local cache; use a local copy: where the hub is reachable, save it with python -c \"import "
        f"datasets; {save}"), proc.stderr


@pytest.mark.parametrize("path", ["hub:gsm8k:train", "hub:openai/gsm8k", "hub:openai/gsm8k:", "hub:a/b/c/d:train", "hub:openai//main:train"])
def test_a_malformed_hub_id_is_refused_with_its_form(path):
    with pytest.raises(ConfigError, match="task.file.heldout_path") as error:
        compose_config(["task=file", "task.file.train_path=data/train.jsonl", f"task.file.heldout_path={path}"])
    assert str(error.value).endswith(f"{path!r} is not a hub dataset id: write {HUB_FORM}")


def test_a_hub_id_parses_to_its_repository_configuration_and_split():
    assert parse_hub_id("hub:openai/gsm8k/main:train") == HubId("openai/gsm8k", "main", "train")
    assert parse_hub_id("hub:HuggingFaceH4/MATH-500:test") == HubId("HuggingFaceH4/MATH-500", None, "test")
    assert str(parse_hub_id("hub:openai/gsm8k/main:train")) == "hub:openai/gsm8k/main:train"


def test_without_the_datasets_package_a_saved_dataset_or_hub_id_says_how_to_install_it(tmp_path, monkeypatch):
    folder = saved(tmp_path / "data", ROWS)
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets now fails
    with pytest.raises(DataError) as error:
        task(folder)
    assert str(error.value) == f"{folder} is a folder written by datasets' save_to_disk, which needs the datasets package: {INSTALL}"
    with pytest.raises(DataError, match="^task.file.train_path=hub:owner/maths:train is a Hugging Face hub dataset, which needs the datasets package"):
        task("hub:owner/maths:train")
