"""With a model of one's own, data is refused before the model's weights load; ``tsctl seed`` and ``tsctl rollout``
check their data before any model is loaded or warmed up, as ``train`` does.

- A local HF folder's tokenizer and ``config.json`` load in a second or less, before its weights: a prompt too long for
  its context is refused by ``train``, ``seed`` and ``rollout`` with no model loaded (the loaders fail the test if
  called), and the refusal's fix (``task.overlong_prompts=drop``) then trains and seeds.
- A folder whose tokenizer does not load is measured once the model loads, as before: the loader's one line names it.
- ``seed`` and ``rollout`` refuse a malformed row and held-out prompts that are train prompts before they load a
  model of one's own or warm up the built-in one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import tsctl.stages.rollout as rollout_stage
import tsctl.stages.seed as seed_stage
import tsctl.stages.train as train_stage
import tsctl.stages.warmup as warmup_stage
from catalogue import passes, refused
from conftest import micro_args, tsctl
from tsctl.models.builtin import builtin_dir
from tsctl.runconfig import compose_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    """A copy of the warmed-up micro model: a local HF folder of one's own (context 256 tokens)."""
    args = micro_args(tmp_path_factory.mktemp("warm"), model_cache)
    tsctl("warmup", *args)
    own = tmp_path_factory.mktemp("own") / "model"
    shutil.copytree(builtin_dir(compose_config(args).cfg), own)
    return own


def forbid_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, a model loaded or warmed up by ``train``, ``seed`` or ``rollout`` fails the test."""
    def refuse(*args, **kwargs):
        pytest.fail("a model was loaded before the data was checked")

    for module, name in ((train_stage, "setup"), (seed_stage, "load_policy"), (rollout_stage, "load_policy"), (warmup_stage, "ensure_builtin")):
        monkeypatch.setattr(module, name, refuse)


def rows(path: Path, count: int, long_question: int = 0, first: int = 0) -> Path:
    """``count`` problems ``i+1`` (from ``i = first``) as JSONL at ``path``; with ``long_question``, a last one of that
    many characters."""
    lines = [{"question": f"{i}+1", "answer": str(i + 1)} for i in range(first, first + count)]
    if long_question:
        lines.append({"question": "1+" * (long_question // 2) + "1", "answer": "2"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def on_file(tmp_path: Path, model: Path | str, data: Path, *extra: str) -> list[str]:
    """A micro run of a file task over ``data`` from ``model``, into ``tmp_path/runs``; seeds of one prompt a step."""
    return [*micro_args(tmp_path / "runs", tmp_path / "cache"), f"model.path={model}", "task=file", f"task.file.train_path={data}",
            "task.file.grader=numeric", "trainer.steps=1", "trainer.eval_every=0", "ratio=25", *extra]


COMMANDS = ["train", "seed", "rollout"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_prompt_too_long_for_a_model_of_one_s_own_is_refused_before_its_weights_load(tmp_path, model, monkeypatch, command):
    data = rows(tmp_path / "long.jsonl", 20, long_question=300)
    args = on_file(tmp_path, model, data)
    forbid_loading(monkeypatch)
    line = refused([tmp_path], command, *args, words=(
        "error: config error at 'task.overlong_prompts': 1 of 19 train prompts are longer than the 231 tokens left to a prompt "
        "(the engine serves 256 tokens per request, engine.max_new_tokens=24 of them for the response and one for the token after a "
        "seed that takes all of it; the longest prompt has 391)", "; leave them out with task.overlong_prompts=drop",
    ))
    assert "could not load" not in line and not (tmp_path / "runs").exists()
    monkeypatch.undo()
    if command != "rollout":  # rollout continues a seed shard: its fix is seed's
        passes(command, *args, "task.overlong_prompts=drop", words=("left out 1 of 19 prompts",))


def test_a_folder_whose_tokenizer_does_not_load_is_named_by_the_model_loader(tmp_path, model):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(model / "config.json", bare / "config.json")  # a config, no tokenizer, no weights
    refused([tmp_path], "train", *on_file(tmp_path, bare, rows(tmp_path / "long.jsonl", 20, long_question=300)),
            words=(f"error: could not load model '{bare}'", "its files are damaged or incomplete"))


@pytest.mark.parametrize("command", ["seed", "rollout"])
@pytest.mark.parametrize("own", [True, False], ids=["own model", "built-in model"])
def test_seed_and_rollout_refuse_bad_data_before_any_model(tmp_path, model, monkeypatch, command, own):
    forbid_loading(monkeypatch)
    source = model if own else "builtin"  # the built-in model is not cached under tmp_path: it would be warmed up first
    bad = tmp_path / "bad.jsonl"
    bad.write_text(rows(tmp_path / "good.jsonl", 20).read_text() + '{"question": "5+1", "answer": \n')
    refused([tmp_path], command, *on_file(tmp_path, source, bad), words=(f"error: {bad} line 21: malformed JSON",))
    copies = rows(tmp_path / "copies.jsonl", 30)
    heldout = rows(tmp_path / "heldout.jsonl", 3, first=4)
    refused([tmp_path], command, *on_file(tmp_path, source, copies, f"task.file.heldout_path={heldout}"),
            words=("3 of the 3 held-out prompts are also train prompts", "or accept it with task.heldout_overlap=allow"))
    assert not (tmp_path / "cache").exists() and not (tmp_path / "runs").exists()
