"""A resume trains on the data the run started with, or is refused: the manifest's ``data`` is never rewritten.

A run's manifest records the digests of its training and held-out data (``data``: the files' content, each split's
problems). ``train ... resume=true`` after a data file was rewritten is refused in one line naming what changed, before
any model is loaded, with nothing on disk changed; each fix the line gives works: the data put back resumes the run,
and a new run on the new data starts from the run's last checkpoint. A run whose manifest predates the digests resumes
as before.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import tsctl.stages.train as train_stage
from catalogue import passes, refused
from conftest import micro_args, tsctl
from tsctl.models.builtin import builtin_dir
from tsctl.runconfig import compose_config
from tsctl.tasks.digests import data_changes, data_digests


def rows(path: Path, count: int, first: int = 0, shift: int = 0) -> Path:
    """``count`` problems ``i+1`` from ``i = first`` as JSONL at ``path``, each answer off by ``shift``."""
    path.write_text("".join(json.dumps({"question": f"{i}+1", "answer": str(i + 1 + shift)}) + "\n" for i in range(first, first + count)))
    return path


def test_what_changed_is_said_in_words() -> None:
    was = {"source": {"name": "file", "train": "sha256:" + "a" * 64, "heldout_fraction": 0.1},
           "train": {"problems": 18, "sha256": "sha256:" + "b" * 64}, "heldout": {"problems": 2, "sha256": "sha256:" + "c" * 64}}
    now = {"source": {**was["source"], "train": "sha256:" + "d" * 64}, "train": {"problems": 17, "sha256": "sha256:" + "e" * 64},
           "heldout": was["heldout"]}
    assert data_changes(was, now) == ["the train split (18 problems, sha256:bbbbbbbb -> 17 problems, sha256:eeeeeeee)",
                                      "task.file.train_path's content (sha256:aaaaaaaa -> sha256:dddddddd)"]
    assert data_changes(was, was) == [] and data_changes(None, now) == [] and data_changes({}, now) == []
    assert data_changes({"source": {"data_seed": 1}}, {"source": {"data_seed": 2}}) == ["data_seed (1 -> 2)"]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    """The warmed-up micro model's folder: the file task's runs start from it (no warm-up of their own)."""
    args = micro_args(tmp_path_factory.mktemp("warm"), model_cache)
    tsctl("warmup", *args)
    return builtin_dir(compose_config(args).cfg)


def no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, a model loaded by ``train`` fails the test (the refusal comes first)."""
    monkeypatch.setattr(train_stage, "setup", lambda *a, **k: pytest.fail("a model was loaded before the data was compared"))


def interrupted(tmp_path: Path, model: Path, *extra: str) -> tuple[Path, list[str]]:
    """A two-step run ``r`` on a file task that stopped after step 1 (its step-2 checkpoint gone); its folder and overrides."""
    args = [*micro_args(tmp_path / "runs", model.parent), f"model.path={model}", "task=file", "trainer.steps=2", "trainer.save_every=1",
            "trainer.eval_every=0", *extra, "name=r"]
    tsctl("train", *args)
    run = tmp_path / "runs" / "default" / "r"
    shutil.rmtree(run / "checkpoints" / "step-2")
    return run, args


@pytest.mark.slow
def test_a_resume_on_rewritten_training_data_is_refused_and_each_fix_works(tmp_path: Path, model: Path, monkeypatch) -> None:
    data = rows(tmp_path / "sums.jsonl", 20)
    original = data.read_bytes()
    run, args = interrupted(tmp_path, model, f"task.file.train_path={data}")
    recorded = json.loads((run / "manifest.json").read_text())["data"]
    rows(data, 20, shift=1)  # every answer rewritten in place
    with monkeypatch.context() as patched:
        no_model(patched)
        line = refused([tmp_path / "runs"], "train", *args, "resume=true", words=(
            f"error: resume of {run}: its data changed since the run started: the train split (18 problems, {recorded['train']['sha256'][:15]} -> "
            "18 problems, sha256:", f"; the heldout split (2 problems, {recorded['heldout']['sha256'][:15]} -> 2 problems, sha256:",
            f"; task.file.train_path's content ({recorded['source']['train'][:15]} -> sha256:",
            "(manifest.json's data records what it trained on); put that data back, or train on this data as a new run under another name=...",
        ))
    start = re.search(r"\(with (model\.path=\S+) it starts from this run's last checkpoint\)$", line).group(1)
    assert start == f"model.path={run / 'checkpoints' / 'step-1'}"
    passes("train", *args, start, "name=r-new", words=("run complete",))  # the new data, from the run's weights, as a new run
    new = json.loads((tmp_path / "runs" / "default" / "r-new" / "manifest.json").read_text())
    assert new["data"]["train"] != recorded["train"] and new["base_model"]["path"] == str(run / "checkpoints" / "step-1")
    data.write_bytes(original)  # the data put back
    passes("train", *args, "resume=true", words=("run complete",))
    resumed = json.loads((run / "manifest.json").read_text())
    assert resumed["status"] == "completed" and resumed["data"] == recorded


@pytest.mark.slow
def test_a_resume_on_another_held_out_file_content_names_the_held_out_split(tmp_path: Path, model: Path, monkeypatch) -> None:
    heldout = rows(tmp_path / "heldout.jsonl", 4, first=100)
    run, args = interrupted(tmp_path, model, f"task.file.train_path={rows(tmp_path / 'sums.jsonl', 20)}", f"task.file.heldout_path={heldout}")
    rows(heldout, 4, first=100, shift=1)
    no_model(monkeypatch)
    line = refused([tmp_path / "runs"], "train", *args, "resume=true", words=("the heldout split (4 problems, sha256:",
                                                                               "task.file.heldout_path's content (sha256:"))
    assert "the train split" not in line


@pytest.mark.slow
def test_a_run_whose_manifest_predates_the_data_digests_resumes(tmp_path: Path, model: Path) -> None:
    data = rows(tmp_path / "sums.jsonl", 20)
    run, args = interrupted(tmp_path, model, f"task.file.train_path={data}")
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["data"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    passes("train", *args, "resume=true", words=("run complete",))
    assert json.loads((run / "manifest.json").read_text())["data"] == data_digests(compose_config(args).cfg.task)
