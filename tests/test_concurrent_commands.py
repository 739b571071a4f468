"""Commands that race on one run or one sweep, started for real, leave every manifest and record as one
command alone would: a resume takes the run's lock before it chooses a checkpoint, a second ``tsctl
ablate`` of a sweep is refused in one line, a sweep never marks a point that another process trains,
and a run that completes after a failure or a signal keeps no stale error.

A process is paused at an exact point by the fault seam (:mod:`tsctl.io.faults`, ``TSCTL_KILL_SIGNAL=STOP``)
while the other command runs, then continued with SIGCONT.
"""

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import reference_run, stable_metrics, start_tsctl, tsctl, wait_paused
from tsctl.cli import app
from tsctl.io.faults import ENV, SIGNAL_ENV
from tsctl.io.run_lock import is_held
from tsctl.io.runs import ENDING_FIELDS, RunDir

SETTINGS = ["trainer.steps=6"]
"""The micro trainer for 6 steps: checkpoints at steps 2, 4 and 6."""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> tuple[Path, list[str]]:
    """An uninterrupted run with SETTINGS, and the overrides that place more runs beside it."""
    return reference_run(tmp_path_factory.mktemp("concurrent") / "runs", model_cache, SETTINGS)


def paused_at(point: str, passage: int = 1) -> dict[str, str]:
    """The environment that pauses a command (SIGSTOP) at its ``passage``-th passage through ``point``."""
    return {ENV: f"{point}:{passage}", SIGNAL_ENV: "STOP"}


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    """Continue ``proc`` if paused and wait for it: its exit code and its whole output."""
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def assert_completed_cleanly(point: Path) -> None:
    """A sweep point trained to the end and evaluated, whose manifest carries no error of any earlier segment."""
    data = manifest(point)
    assert data["status"] == "completed" and not set(ENDING_FIELDS) & set(data), data
    assert [r["step"] for r in stable_metrics(point)] == [0, 1, 2, 3]
    assert 0 <= json.loads((point / "final_eval.json").read_text())["greedy_accuracy"] <= 1


@pytest.mark.slow
def test_a_resume_of_a_live_run_is_refused_and_the_live_run_ends_as_if_alone(reference):
    ref, args = reference
    args = [*args, "name=live"]
    run = ref.parent / "live"
    live = start_tsctl("train", *args, **paused_at("step-logged", 3))
    try:
        wait_paused(live)
        second = tsctl("train", *args, "resume=true", check=False)
        assert second.returncode == 2
        assert errors(second.stdout + second.stderr) == [
            f"error: run {run} is in use by pid {live.pid} on {manifest(run)['host']}; wait for it to end (or stop it), then retry"
        ]
        assert finish(live)[0] == 0
    finally:
        live.kill()
    assert stable_metrics(run) == stable_metrics(ref)
    assert manifest(run)["status"] == "completed" and "error" not in manifest(run)


@pytest.mark.slow  # its reference run is the command line's
def test_a_resume_holds_the_runs_lock_when_it_chooses_its_checkpoint(reference, monkeypatch):
    from tsctl.io import resume_plan

    ref, args = reference
    args = [*args, "name=locked-plan"]
    assert CliRunner().invoke(app, ["train", *args]).exit_code == 0
    held = []

    def plan(run: Path, eval_at_start: bool) -> resume_plan.ResumePlan:
        held.append(is_held(run))
        return resume_plan.plan_resume(run, eval_at_start)

    monkeypatch.setattr("tsctl.trainer.run_session.plan_resume", plan)
    result = CliRunner().invoke(app, ["train", *args, "resume=true"])
    assert result.exit_code == 0, result.output
    assert held == [True]


@pytest.mark.slow
def test_a_second_ablate_of_a_sweep_just_locked_is_refused_in_one_line_and_the_first_trains_it(micro, tmp_path):
    args = [*micro, "seed=0,1", "name=both"]
    sweep = tmp_path / "runs" / "default" / "both"
    first = start_tsctl("ablate", *args, **paused_at("sweep-locked"))
    try:
        wait_paused(first)  # holds the sweep's lock, no point started: the second one meets it for certain
        second = tsctl("ablate", *args, check=False)
        refused = second.stdout + second.stderr
        assert second.returncode == 2 and len(errors(refused)) == 1 and "Traceback" not in refused
        assert errors(refused)[0].startswith(f"error: sweep {sweep} is in use by pid {first.pid} on ")
        assert "(another `tsctl ablate` of it); wait for that one to end (or stop it), then rerun this command" in errors(refused)[0]
        assert not (sweep / "seed=0").exists() and not (sweep / "seed=1").exists()
        assert finish(first)[0] == 0
    finally:
        first.kill()
    for point in ("seed=0", "seed=1"):
        assert_completed_cleanly(sweep / point)


@pytest.mark.slow
def test_a_sweep_leaves_a_point_that_another_process_trains_alone_and_takes_it_up_when_rerun(micro, tmp_path):
    sweep = tmp_path / "runs" / "default" / "shared"
    place = [f"experiment=default/{sweep.name}", "name='seed=0'", "seed=0"]
    by_hand = start_tsctl("train", *micro, *place, **paused_at("step-logged"))
    try:
        wait_paused(by_hand)
        code, out = finish(start_tsctl("ablate", *micro, "seed=0,1", "name=shared"))
        assert code == 1 and "1 run(s) failed: seed=0; rerun the same command to retry them" in out
        assert f"point seed=0: not marked failed, pid {by_hand.pid} on " in out
        assert manifest(sweep / "seed=0")["status"] == "running" and "error" not in manifest(sweep / "seed=0")
        assert_completed_cleanly(sweep / "seed=1")
        assert finish(by_hand)[0] == 0
    finally:
        by_hand.kill()
    tsctl("ablate", *micro, "seed=0,1", "name=shared")
    for point in ("seed=0", "seed=1"):
        assert_completed_cleanly(sweep / point)


@pytest.mark.slow
def test_a_second_ablate_while_the_first_trains_is_refused_and_the_first_ends_cleanly(micro, tmp_path):
    sweep = tmp_path / "runs" / "default" / "staggered"
    args = [*micro, "seed=0,1", "name=staggered"]
    first = start_tsctl("ablate", *args, **paused_at("step-logged"))
    try:
        wait_paused(first)
        second = tsctl("ablate", *args, check=False)
        assert second.returncode == 2 and len(errors(second.stdout + second.stderr)) == 1
        assert manifest(sweep / "seed=0")["status"] == "running" and not (sweep / "seed=1" / "manifest.json").exists()
        assert finish(first)[0] == 0
    finally:
        first.kill()
    for point in ("seed=0", "seed=1"):
        assert_completed_cleanly(sweep / point)
    summary = (sweep / "report" / "summary.md").read_text()
    assert "failed" not in summary and "in use" not in summary


def test_running_again_drops_what_the_last_ending_recorded(tmp_path):
    run = RunDir(tmp_path)
    run.set_status("failed", error="RuntimeError: diverged", failed_step=3, nonfinite="loss", nonfinite_tensor="loss")
    run.set_status("interrupted", signal="SIGTERM", interrupted_step=4, checkpoint_step=4)
    assert {"error", "failed_step", "signal", "checkpoint_step"} <= set(run.manifest())
    run.mark_running(started_step=4)
    kept = run.manifest()
    assert not set(ENDING_FIELDS) & set(kept) and kept["status"] == "running" and kept["started_step"] == 4
    run.set_status("failed", error="OSError: gone")
    run.set_status("completed", finished_step=6)
    assert "error" not in run.manifest() and run.manifest()["finished_step"] == 6


@pytest.mark.slow  # its reference run is the command line's
def test_a_signal_during_the_step_0_evaluation_stops_the_run_there_and_the_resume_is_exact(reference, monkeypatch):
    from tsctl.stages import train as train_stage

    ref, args = reference
    args = [*args, "name=step-0-signal"]
    run = ref.parent / "step-0-signal"
    scored = train_stage.heldout_metrics

    def signalled_at_step_0(engine, formatter, task, cfg, step):
        if step == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return scored(engine, formatter, task, cfg, step)

    missed = []
    before = signal.signal(signal.SIGTERM, lambda signum, frame: missed.append(signum))  # where the run does not take it
    try:
        monkeypatch.setattr(train_stage, "heldout_metrics", signalled_at_step_0)
        result = CliRunner().invoke(app, ["train", *args])
    finally:
        signal.signal(signal.SIGTERM, before)
    assert missed == [] and result.exit_code == 143, result.output
    data = manifest(run)
    assert (data["status"], data["signal"], data["interrupted_step"], data["checkpoint_step"]) == ("interrupted", "SIGTERM", 0, 0)
    monkeypatch.setattr(train_stage, "heldout_metrics", scored)
    assert CliRunner().invoke(app, ["train", *args, "resume=true"]).exit_code == 0
    assert stable_metrics(run) == stable_metrics(ref)
    assert manifest(run)["status"] == "completed" and not set(ENDING_FIELDS) & set(manifest(run))
