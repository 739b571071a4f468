"""Data checked before compute, in bounded memory, and the built-in model's warm-up cache keyed on its data.

- A file task whose held-out split is empty (one row), whose held-out rows are train rows, that holds a prompt too
  long for the built-in model, or one 50 MB row, is refused by ``tsctl train`` in one line before any model is built
  or warmed up (the builders fail the test if called); the 50 MB row is found by its size while the file is read, in
  a few MB of Python memory, and so is a row too large in Parquet or a saved dataset (or skipped and counted).
- ``tsctl warmup`` refuses such data before it builds the model.
- The warm-up cache's folder follows the data: rows rewritten at the same path give another folder, the same rows at
  another path the same one; task keys the warm-up does not read leave it as it is, those it reads change it.
- A run manifest's ``data`` holds the digests of the training and held-out data.
"""

import dataclasses
import json
import time
import tracemalloc
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import tsctl.models.builtin
import tsctl.stages.train
import tsctl.stages.warmup
from tsctl.cli import app
from tsctl.models.builtin import builtin_dir
from tsctl.runconfig import compose_config
from tsctl.tasks.digests import data_digests
from tsctl.tasks.file_task import FileTask, FileTaskSettings
from tsctl.tasks.records import DataError

runner = CliRunner()

ROW_MB = 50


def rows(path: Path, count: int, same: bool = False, long_question: int = 0) -> Path:
    """``count`` problems ``i+1`` (all ``0+1`` when ``same``) with worked solutions as JSONL at ``path``; with
    ``long_question``, a last row whose question is that many characters."""
    lines = [{"question": f"{0 if same else i}+1", "answer": str((0 if same else i) + 1), "solution": f"Answer: {(0 if same else i) + 1}"}
             for i in range(count)]
    if long_question:
        lines.append({"question": "1+" * (long_question // 2) + "1", "answer": "2", "solution": "Answer: 2"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def file_args(tmp_path: Path, data: Path, *extra: str) -> list[str]:
    """A micro built-in model on a file task over ``data``, everything written under ``tmp_path``."""
    return [f"runs_dir={tmp_path / 'runs'}", f"model.cache_dir={tmp_path / 'cache'}", "model=micro", "trainer=micro", "task=file",
            f"task.file.train_path={data}", "task.file.grader=numeric", "engine.max_new_tokens=24", *extra]


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every way a command builds, warms up or loads a model fails the test; the list of those that were called."""
    called: list[str] = []

    def forbid(name: str):
        def refuse(*args, **kwargs):
            called.append(name)
            raise RuntimeError(f"{name} called before the data was checked")
        return refuse

    monkeypatch.setattr(tsctl.models.builtin, "build_tiny_model", forbid("build_tiny_model"))
    monkeypatch.setattr(tsctl.stages.warmup, "ensure_builtin", forbid("ensure_builtin"))
    monkeypatch.setattr(tsctl.stages.train, "setup", forbid("setup"))
    return called


def refused(command: str, args: list[str], called: list[str]) -> str:
    """``tsctl COMMAND ARGS`` refused with exit code 2 and one ``error:`` line, no model built; that line."""
    result = runner.invoke(app, [command, *args])
    found = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(found) == 1 and "Traceback" not in result.output, result.output
    assert called == []
    return found[0]


def test_an_empty_held_out_split_is_refused_before_any_model_is_built(tmp_path, no_model):
    line = refused("train", file_args(tmp_path, rows(tmp_path / "one.jsonl", 1)), no_model)
    assert line.startswith("error: the held-out split has no problem") and "trainer.eval_every=0" in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_held_out_rows_that_are_train_rows_are_refused_before_any_model_is_built(tmp_path, no_model):
    line = refused("train", file_args(tmp_path, rows(tmp_path / "copies.jsonl", 30, same=True)), no_model)
    assert "3 of the 3 held-out prompts are also train prompts" in line and "task.heldout_overlap=allow" in line


@pytest.mark.parametrize("characters, longest", [(3000, "3091"), (10000, "10089 characters")])
def test_a_prompt_too_long_for_the_built_in_model_is_refused_before_its_warm_up(tmp_path, no_model, characters, longest):
    """3001 characters are tokenized (<bos>, the question with its instruction of 87 characters, two newlines: 3091 tokens);
    10001, more than 4 times what the longest vocabulary entry (5 characters) could fit in 233 tokens, are not."""
    data = rows(tmp_path / "long.jsonl", 20, long_question=characters)
    line = refused("train", file_args(tmp_path, data), no_model)
    assert "error: config error at 'task.overlong_prompts': 1 of 19 train prompts are longer than the 232 tokens left" in line
    assert f"the longest prompt has {longest});" in line
    assert refused("warmup", file_args(tmp_path, data), no_model) == line


def test_a_50_mb_row_is_refused_by_its_size_in_seconds_and_little_memory(tmp_path, no_model):
    data = rows(tmp_path / "huge.jsonl", 40, long_question=ROW_MB << 20)
    size = len(data.read_bytes().splitlines()[-1])
    assert size > ROW_MB << 20
    args = file_args(tmp_path, data)
    assert runner.invoke(app, ["train", *args, "--cfg", "job"]).exit_code == 0  # the command's modules imported, not measured
    tracemalloc.start()
    started = time.perf_counter()
    try:
        line = refused("train", args, no_model)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    seconds = time.perf_counter() - started
    assert line.startswith(f"error: {data} line 41: {size} bytes, more than the 1048576 a row may hold (task.file.max_row_bytes); "
                           "remove or shorten that row, or raise task.file.max_row_bytes (or set task.file.on_bad_row=skip")
    assert peak < 8 << 20, peak  # the row is never held: a 1 MiB read at a time
    assert seconds < 60, seconds


def test_warmup_refuses_data_before_it_builds_the_model(tmp_path, no_model):
    line = refused("warmup", file_args(tmp_path, rows(tmp_path / "copies.jsonl", 30, same=True)), no_model)
    assert "held-out prompts are also train prompts" in line


def big_cell_rows(count: int, big_at: int, size: int) -> list[dict]:
    return [{"question": "x" * size if i == big_at else f"{i}+1", "answer": str(i + 1)} for i in range(count)]


@pytest.mark.parametrize("form", ["parquet", "saved dataset"])
def test_a_row_too_large_in_a_table_is_refused_or_skipped_by_its_size(tmp_path, form):
    table = big_cell_rows(3000, 2500, 5000)  # in the third record batch
    if form == "parquet":
        path = tmp_path / "d.parquet"
        pq.write_table(pa.Table.from_pylist(table), path)
    else:
        path = tmp_path / "saved"
        datasets.Dataset.from_list(table).save_to_disk(str(path))
    settings = FileTaskSettings(train_path=str(path), solution_field=None, max_row_bytes=4096)
    with pytest.raises(DataError, match=rf"^{path} row 2501: 5004 bytes, more than the 4096 a row may hold \(task.file.max_row_bytes\)"):
        FileTask(settings, data_seed=0)
    skipped = FileTask(dataclasses.replace(settings, on_bad_row="skip"), data_seed=0, on_bad_row="skip")
    assert skipped.skipped == 1 and len(skipped.problems("train")) + len(skipped.problems("heldout")) == 2999


def test_a_line_of_exactly_the_limit_is_read_and_one_byte_more_is_not(tmp_path):
    line = json.dumps({"question": "1+1", "answer": "2"})
    path = tmp_path / "d.jsonl"
    path.write_text(f"{line}\n{line}\n{line}")
    task = FileTask(FileTaskSettings(train_path=str(path), max_row_bytes=len(line), heldout_fraction=0.0), data_seed=0)
    assert len(task.problems("train")) == 3
    with pytest.raises(DataError, match=rf"line 1: {len(line)} bytes, more than the {len(line) - 1} a row may hold"):
        FileTask(FileTaskSettings(train_path=str(path), max_row_bytes=len(line) - 1), data_seed=0)


def cache_of(*overrides: str) -> Path:
    return builtin_dir(compose_config(list(overrides)).cfg)


def test_rows_rewritten_at_the_same_path_give_a_new_warm_up_and_the_same_rows_elsewhere_the_same(tmp_path):
    data = rows(tmp_path / "train.jsonl", 20)
    before = cache_of("task=file", f"task.file.train_path={data}")
    rows(tmp_path / "copy.jsonl", 20)
    assert cache_of("task=file", f"task.file.train_path={tmp_path / 'copy.jsonl'}") == before
    data.write_text(data.read_text().replace("Answer: 7", "Answer: 8"))  # one worked solution rewritten in place
    assert cache_of("task=file", f"task.file.train_path={data}") != before


@pytest.mark.parametrize("task, unread, read", [
    ("file", ["task.reward=random", "task.reward_p=0.3", "task.heldout_overlap=allow", "task.overlong_prompts=drop", "task.train_size=7",
              "task.heldout_size=3", "task.countdown.max_target=50", "task.arithmetic.max_terms=4"],
     ["task.file.answer_pattern=Final:", "task.file.heldout_fraction=0.2", "task.data_seed=9", "task.file.solution_field=null"]),
    ("countdown", ["task.reward=format", "task.heldout_overlap=allow", "task.overlong_prompts=drop", "task.arithmetic.max_terms=4",
                   "task.file.grader=exact"],
     ["task.data_seed=9", "task.train_size=100", "task.countdown.max_target=50"]),
])
def test_a_task_key_the_warm_up_does_not_read_keeps_its_cache_and_one_it_reads_does_not(tmp_path, task, unread, read):
    base = [f"task={task}", f"task.file.train_path={rows(tmp_path / 'train.jsonl', 20)}"]
    folder = cache_of(*base)
    assert [key for key in unread if cache_of(*base, key) != folder] == []
    assert [key for key in read if cache_of(*base, key) == folder] == []


def test_the_manifest_s_data_holds_the_digests_of_the_training_and_held_out_data(tmp_path):
    data = rows(tmp_path / "train.jsonl", 20)
    cfg = compose_config(["task=file", f"task.file.train_path={data}"]).cfg
    entry = data_digests(cfg.task)
    assert (entry["train"]["problems"], entry["heldout"]["problems"]) == (18, 2)
    assert entry["source"]["train"].startswith("sha256:") and entry["source"]["heldout_fraction"] == 0.1
    heldout = rows(tmp_path / "heldout.jsonl", 3)
    with_file = data_digests(compose_config(["task=file", f"task.file.train_path={data}", f"task.file.heldout_path={heldout}"]).cfg.task)
    assert with_file["train"]["sha256"] != entry["train"]["sha256"] and with_file["source"]["heldout"].startswith("sha256:")
    data.write_text(data.read_text().replace('"question": "4+1"', '"question": "4+2"'))
    assert data_digests(cfg.task)["source"]["train"] != entry["source"]["train"]
    generated = data_digests(compose_config(["task=countdown", "task.data_seed=5"]).cfg.task)
    assert list(generated) == ["source"] and generated["source"]["data_seed"] == 5  # its settings are its content


def test_with_a_held_out_file_the_fraction_and_data_seed_are_not_read(tmp_path):
    base = ["task=file", f"task.file.train_path={rows(tmp_path / 'train.jsonl', 20)}",
            f"task.file.heldout_path={rows(tmp_path / 'heldout.jsonl', 3)}"]
    folder = cache_of(*base)
    assert cache_of(*base, "task.file.heldout_fraction=0.3", "task.data_seed=9") == folder
    rows(tmp_path / "heldout.jsonl", 4)  # the held-out rows the warm-up scores, rewritten
    assert cache_of(*base) != folder


def test_a_sweep_over_an_empty_held_out_split_is_refused_before_any_point_trains_even_without_evaluations(tmp_path, no_model):
    data = rows(tmp_path / "one.jsonl", 1)
    line = refused("ablate", [*file_args(tmp_path, data, "trainer.eval_every=0"), "ratio=0,25"], no_model)
    assert line.startswith("error: the held-out split has no problem, and tsctl ablate scores each point's final checkpoint")
    assert "tsctl train trainer.eval_every=0" in line and not (tmp_path / "runs").exists()


def test_the_sweep_s_hint_followed_trains_the_point_without_a_held_out_split(tmp_path):
    data = rows(tmp_path / "one.jsonl", 1)
    result = runner.invoke(app, ["train", *file_args(tmp_path, data, "trainer.eval_every=0", "model.warmup.examples=64", "trainer.steps=1")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "runs" / "default" / "ratio0-seed0" / "manifest.json").read_text())["status"] == "completed"
