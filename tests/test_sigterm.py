"""SIGTERM and SIGINT as a checkpoint: a signalled ``tsctl train`` finishes its step, saves it, says how to
resume and exits with 128 + the signal; ``resume=true`` then ends exactly as an uninterrupted run.

The signal arrives at exact points through the ``TSCTL_KILL_AT`` seam with ``TSCTL_KILL_SIGNAL``
(:mod:`tsctl.io.faults`): inside a step, after its metrics line, inside a checkpoint write. Under
``torchrun`` both ranks stop after the same step when only rank 0 is signalled.
"""

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import reference_run, stable_metrics
from tsctl.cli import app
from tsctl.io.checkpoints import latest_checkpoint
from tsctl.io.faults import ENV, SIGNAL_ENV
from tsctl.trainer.stop_signals import Interrupted, StopSignals

SETTINGS = ["trainer.steps=6"]
"""The micro trainer for 6 steps: checkpoints at steps 2, 4 and 6 (``save_every=2``)."""

HITS = {"step-sampled": 5, "step-logged": 5, "checkpoint-partial": 2}
"""Passages through each point before the last step (a signal during the last step lets the run complete)."""


def stopped_after(point: tuple[str, int]) -> int:
    """The step a run signalled at ``point`` stops after: the step under way is finished."""
    name, n = point
    return 2 * n if name == "checkpoint-partial" else n


def draw_points(seed: int = 31, count: int = 5) -> list[tuple[str, int]]:
    """``count`` signal points drawn with ``seed``: one passage of each point, the rest from every passage of every point."""
    rng = random.Random(seed)
    every = [(name, n) for name, hits in HITS.items() for n in range(1, hits + 1)]
    first = [(name, rng.randint(1, hits)) for name, hits in HITS.items()]
    return sorted(first + rng.sample([p for p in every if p not in first], count - len(first)), key=stopped_after)


POINTS = draw_points()


def signalled(args: list[str], point: tuple[str, int], name: str) -> subprocess.CompletedProcess:
    """``tsctl train ARGS``, sent SIG``name`` at ``point``."""
    env = {**os.environ, "TSCTL_NO_PROGRESS": "1", "COLUMNS": "1000", ENV: f"{point[0]}:{point[1]}", SIGNAL_ENV: name}
    return subprocess.run([sys.executable, "-m", "tsctl", "train", *args], env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> tuple[Path, list[str]]:
    """An uninterrupted run with SETTINGS, and the overrides that place more runs beside it."""
    return reference_run(tmp_path_factory.mktemp("sigterm") / "runs", model_cache, SETTINGS)


def resume_to_the_end(args: list[str], reference: Path, run: Path) -> None:
    result = CliRunner().invoke(app, ["train", *args, "resume=true"])
    assert result.exit_code == 0, result.output
    assert stable_metrics(run) == stable_metrics(reference)
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS, ids=[f"{name}-{n}" for name, n in POINTS])
def test_sigterm_saves_the_finished_step_and_the_resume_ends_as_an_uninterrupted_run(reference, point):
    ref, args = reference
    run = ref.parent / f"{point[0]}-{point[1]}"
    args = [*args, f"name={run.name}"]
    step = stopped_after(point)
    proc = signalled(args, point, "TERM")
    assert proc.returncode == 143, proc.stdout + proc.stderr
    assert f"interrupted by SIGTERM: stopped after step {step} (checkpoint step-{step}); resume with the same command and resume=true" in (proc.stdout + proc.stderr).splitlines()
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["status"], manifest["signal"], manifest["interrupted_step"], manifest["checkpoint_step"]) == ("interrupted", "SIGTERM", step, step)
    assert latest_checkpoint(run / "checkpoints")[0] == step
    assert [r["step"] for r in stable_metrics(run)] == list(range(step + 1))
    resume_to_the_end(args, ref, run)


@pytest.mark.slow
def test_sigint_without_checkpoint_on_signal_resumes_from_the_last_regular_checkpoint(reference):
    ref, args = reference
    args = [*args, "name=no-save", "trainer.checkpoint_on_signal=false"]
    run = ref.parent / "no-save"
    proc = signalled(args, ("step-logged", 3), "INT")
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted by SIGINT: stopped after step 3 (checkpoint step-2); resume with the same command and resume=true" in (proc.stdout + proc.stderr).splitlines()
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["status"], manifest["signal"], manifest["interrupted_step"], manifest["checkpoint_step"]) == ("interrupted", "SIGINT", 3, 2)
    assert latest_checkpoint(run / "checkpoints")[0] == 2
    resume_to_the_end(args, ref, run)


def test_signals_are_noted_until_the_steps_end_then_the_handlers_before_are_back():
    before = signal.getsignal(signal.SIGTERM)
    saves: list[int] = []
    with StopSignals(steps=6, save_on_signal=True) as signals:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # a second signal changes nothing
        assert signals.noted == signal.SIGTERM
        signals.check(6, 6, lambda: saves.append(6))  # during the last step: the run completes
        with pytest.raises(Interrupted) as stop:
            signals.check(3, 2, lambda: saves.append(3))
    assert signal.getsignal(signal.SIGTERM) is before and saves == [3]
    assert stop.value.exit_code == 143
    assert stop.value.manifest_fields() == {"signal": "SIGTERM", "interrupted_step": 3, "checkpoint_step": 3}
    assert str(stop.value) == "SIGTERM: stopped after step 3 (checkpoint step-3); resume with the same command and resume=true"


def test_without_checkpoint_on_signal_the_stop_names_the_last_regular_checkpoint_or_none():
    with StopSignals(steps=6, save_on_signal=False) as signals:
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(Interrupted) as stop:
            signals.check(1, 0, lambda: pytest.fail("saved"))
    assert stop.value.exit_code == 130
    assert str(stop.value) == "SIGINT: stopped after step 1 (no checkpoint yet); resume with the same command and resume=true"


def torchrun(args: list[str], **env_vars: str) -> subprocess.CompletedProcess:
    """``tsctl train ARGS`` on two ranks (``torchrun``, gloo, one thread each)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "tsctl", "train", *args]
    env = {**os.environ, "TSCTL_NO_PROGRESS": "1", "COLUMNS": "1000", "OMP_NUM_THREADS": "1", **env_vars}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_two_ranks_stop_after_the_same_step_when_only_rank_0_is_signalled(reference):
    ref, args = reference
    whole = torchrun([*args, "name=two-ranks"])
    assert whole.returncode == 0, whole.stderr[-3000:]
    run = ref.parent / "two-ranks-signalled"
    args = [*args, f"name={run.name}"]
    stopped = torchrun(args, **{ENV: "step-logged:3", SIGNAL_ENV: "TERM"})  # step-logged is passed by rank 0 alone
    assert stopped.returncode != 0
    lines = (stopped.stdout + stopped.stderr).splitlines()
    assert lines.count("interrupted by SIGTERM: stopped after step 3 (checkpoint step-3); resume with the same command and resume=true") == 1
    assert "exitcode  : 143" in stopped.stdout + stopped.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["status"], manifest["interrupted_step"], manifest["checkpoint_step"], manifest["world_size"]) == ("interrupted", 3, 3, 2)
    assert latest_checkpoint(run / "checkpoints")[0] == 3
    resumed = torchrun([*args, "resume=true"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert stable_metrics(run) == stable_metrics(ref.parent / "two-ranks")
