"""The catalogue of bad inputs (see ``tests/catalogue.py``): starts that used to end in a traceback or leave a folder.

- An environment setting that a library tsctl calls would refuse (wandb's settings, torchrun's variables), and
  wandb online without a login: one line, before any run folder; the fix applied runs.
- wandb failing once the run folder exists, and SIGTERM during a start: no folder is left (a resumed run is
  left as it was), and rerunning works.
- A file-size limit hit while checkpointing: one line naming the checkpoint and the fix; the run resumes.
"""

import json
import resource
import signal
from pathlib import Path

import pytest

from catalogue import passes, refused, snapshot
from conftest import micro_args, start_tsctl, tsctl, wait_paused
from tsctl.io.faults import ENV, SIGNAL_ENV
from tsctl.io.sinks import LoggerError
from tsctl.models.builtin import builtin_dir
from tsctl.runconfig import compose_config

pytestmark = pytest.mark.slow

NO_LOGIN = {"NETRC": "/nonexistent/netrc", "WANDB_API_KEY": ""}
"""No W&B login, whatever the machine has."""


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    """The session's model cache with the micro model warmed up (no command here prints its warm-up)."""
    tsctl("warmup", *micro_args(tmp_path_factory.mktemp("warm"), model_cache))
    return model_cache


def one_step(tmp_path: Path, cache: Path, name: str) -> list[str]:
    return [*micro_args(tmp_path / "runs", cache), "trainer.steps=1", "trainer.save_every=1", f"name={name}"]


@pytest.mark.parametrize(
    "env, words",
    [
        ({"WANDB_MODE": "bogus"}, ["the environment sets WANDB_MODE='bogus': wandb refuses it (Input should be 'online', 'offline'", "fix it or unset it"]),
        ({"WANDB_MODE": "offline", "WANDB_INIT_TIMEOUT": "soon"}, ["the environment sets WANDB_INIT_TIMEOUT='soon': wandb refuses it"]),
        ({"WANDB_MODE": "offline", "WORLD_SIZE": "two"}, ["the environment sets WORLD_SIZE='two': not a whole number",
                                                          "unset them to run one process, or start with torchrun"]),
        ({"WANDB_MODE": "online", **NO_LOGIN}, ["logger=wandb logs online, but there is no W&B login here (no WANDB_API_KEY, no entry for api.wandb.ai",
                                                "run `wandb login` (or set WANDB_API_KEY), or set WANDB_MODE=offline and `wandb sync` the run later"]),
    ],
    ids=["wandb-mode", "wandb-init-timeout", "world-size", "wandb-no-login"],
)
def test_an_environment_a_library_refuses_is_one_line_before_any_run_folder(tmp_path, warm, env, words):
    args = [*one_step(tmp_path, warm, "env"), "logger=wandb"]
    refused([tmp_path], "train", *args, words=tuple(words), **env)
    fixed = {**env, "WANDB_MODE": "offline", "WANDB_INIT_TIMEOUT": "90", "WORLD_SIZE": "1"}  # each set as the line says
    passes("train", *args, words=("run complete",), **fixed)


def test_wandb_failing_once_the_run_folder_exists_leaves_no_folder(tmp_path, warm, monkeypatch):
    import wandb

    from tsctl.stages.train import train

    def unreachable(**kwargs):
        raise ConnectionError("wandb.ai is unreachable")

    monkeypatch.setattr(wandb, "init", unreachable)
    monkeypatch.setenv("WANDB_MODE", "offline")
    composed = compose_config([*one_step(tmp_path, warm, "wb"), "logger=wandb"])
    with pytest.raises(LoggerError, match=r"logger=wandb could not start \(ConnectionError: wandb.ai is unreachable\); .* or use logger=console"):
        train(composed)
    assert not (tmp_path / "runs").exists()  # no half folder: the one made for this start went with it
    monkeypatch.undo()
    assert train(compose_config([*one_step(tmp_path, warm, "wb"), "logger=console"])).manifest()["status"] == "completed"


def test_sigterm_during_a_start_leaves_no_folder(tmp_path, warm):
    args = [*one_step(tmp_path, warm, "sig"), "logger=wandb"]
    run = tmp_path / "runs" / "default" / "sig"
    proc = start_tsctl("train", *args, WANDB_MODE="offline", **{ENV: "run-folder-made:1", SIGNAL_ENV: "STOP"})
    wait_paused(proc)  # held where its new folder exists and its start goes on: the signal lands there, whatever the timing
    assert (run / "config.yaml").is_file()
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate()
    lines = [line for line in (out + err).splitlines() if line.strip() and "wandb" not in line]
    assert proc.returncode == 143 and "Traceback" not in out + err, out + err
    assert lines == ["interrupted by SIGTERM during the start, before any step: nothing was trained (a new run leaves no folder, a resumed "
                     "one's manifest is as it was); rerun the same command"]
    assert not (tmp_path / "runs").exists()
    passes("train", *args, words=("run complete",), WANDB_MODE="offline")  # rerun, as the line says


def test_sigterm_during_a_resumes_start_leaves_the_run_as_it_was(tmp_path, warm):
    args = one_step(tmp_path, warm, "again")
    tsctl("train", *args)
    run = tmp_path / "runs" / "default" / "again"
    before = snapshot(run)
    proc = tsctl("train", *args, "resume=true", check=False, **{ENV: "resume-planned:1", SIGNAL_ENV: "TERM"})
    assert proc.returncode == 143 and "during the start, before any step" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(run) == before
    passes("train", *args, "resume=true", words=("run complete",))


def test_a_file_size_limit_while_checkpointing_is_one_line_with_the_path(tmp_path, warm):
    args = [*micro_args(tmp_path / "runs", warm), "trainer.steps=2", "trainer.save_every=1", "name=big"]
    run = tmp_path / "runs" / "default" / "big"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    weights = (builtin_dir(compose_config(args).cfg) / "model.safetensors").stat().st_size
    resource.setrlimit(resource.RLIMIT_FSIZE, (weights // 2, hard))  # the child inherits it; the weights do not fit
    try:
        proc = tsctl("train", *args, check=False)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert errors == [f"error: file too large while writing {run / 'checkpoints' / 'step-1'}: past this process's file-size limit (`ulimit -f` "
                      "shows it; the shell's `ulimit -f unlimited` lifts it) or the file system's largest file; raise the limit and rerun "
                      "(with resume=true for a run: its last complete checkpoint is intact), or point runs_dir=... at another file system"]
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
    passes("train", *args, "resume=true", words=("run complete",))  # the limit raised, resumed
