"""``tsctl ablate``: a micro sweep completes with a report, reruns skip, a killed point resumes, a failing
point is recorded without losing the others, wandb works offline, and ``tsctl report`` reads one run."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import tsctl
from tsctl.config.errors import ConfigError
from tsctl.io.runs import open_run
from tsctl.stages.ablate import ablate, expand, sweep_name

PLOTS = ("reward_accuracy.png", "entropy_by_position.png", "clip_by_position.png", "passk.png")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One runs_dir for the module's sweeps."""
    return tmp_path_factory.mktemp("ablate") / "runs"


def in_runs(micro: list[str], runs: Path) -> list[str]:
    """The micro overrides, writing into the module's runs_dir."""
    return [o for o in micro if not o.startswith("runs_dir=")] + [f"runs_dir={runs}"]


def steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def assert_point_done(run: Path, pass_k: tuple[int, ...] = (1, 2, 4, 8)) -> None:
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"
    final = json.loads((run / "final_eval.json").read_text())
    assert 0 <= final["greedy_accuracy"] <= 1 and all(0 <= final[f"pass@{k}"] <= 1 for k in pass_k)


def test_points_are_hydra_sweeps_and_the_sweep_folder_ignores_their_order():
    points, swept = expand(["ratio=0,25", "seed=range(1,3)", "refresh=5"])
    assert swept == ["ratio", "seed"]
    assert points == [["ratio=0", "seed=1", "refresh=5"], ["ratio=0", "seed=2", "refresh=5"], ["ratio=25", "seed=1", "refresh=5"], ["ratio=25", "seed=2", "refresh=5"]]
    assert sweep_name(points) == sweep_name(expand(["refresh=5", "seed=2,1", "ratio=25,0", "runs_dir=elsewhere"])[0])
    with pytest.raises(ConfigError, match="cannot be swept"):
        expand(["experiment=a,b"])


def test_a_failing_point_is_recorded_and_the_others_are_kept(tmp_path, monkeypatch):
    def fake_train(composed):
        run = open_run(composed.cfg, composed.node, "train")
        if composed.cfg.ratio == 50:
            raise RuntimeError("diverged")
        run.append_metrics({"step": 1, "reward/mean": 0.5, "entropy": 1.0})
        run.set_status("completed")
        return run

    monkeypatch.setattr("tsctl.stages.train.train", fake_train)
    monkeypatch.setattr("tsctl.stages.ablate.final_eval", lambda cfg, run: {"step": 1, "greedy_accuracy": 0.5, "pass@1": 0.4})
    folder, failed = ablate([f"runs_dir={tmp_path}", "model=micro", "ratio=0,50", "name=s"])
    assert folder == tmp_path / "default" / "s" and failed == ["ratio=50"]
    assert json.loads((folder / "ratio=50" / "manifest.json").read_text())["error"] == "RuntimeError: diverged"
    assert (folder / "ratio=0" / "final_eval.json").is_file()
    summary = (folder / "report" / "summary.md").read_text()
    assert "| ratio=0 | 1/1 | 0.500 | 0.400 |" in summary and "ratio=50: failed — RuntimeError: diverged" in summary


@pytest.mark.slow
def test_sweep_writes_points_summary_and_plots_then_skips_them(micro, runs):
    args = [*in_runs(micro, runs), "ratio=0,50", "refresh=2", "name=two"]
    tsctl("ablate", *args)
    sweep = runs / "default" / "two"
    points = [sweep / "ratio=0", sweep / "ratio=50"]
    for point in points:
        assert_point_done(point)
    report = sweep / "report"
    assert all((report / name).stat().st_size > 10_000 for name in PLOTS)
    summary = (report / "summary.md").read_text()
    assert "| ratio=0 | 1/1 |" in summary and "| ratio=50 | 1/1 |" in summary
    assert len((report / "summary.csv").read_text().splitlines()) == 3

    before = {p: (p / "metrics.jsonl").stat().st_mtime_ns for p in points}
    again = tsctl("ablate", *args)
    assert again.stderr.count("completed, skipped") == 2
    assert before == {p: (p / "metrics.jsonl").stat().st_mtime_ns for p in points}

    one = tsctl("report", str(points[1]))
    assert "held-out greedy acc." in one.stderr
    assert {"summary.md", "summary.csv", *PLOTS} <= {p.name for p in (points[1] / "plots").iterdir()}


@pytest.mark.slow
def test_a_point_killed_mid_run_is_resumed(micro, runs):
    args = [*in_runs(micro, runs), "ratio=0,50", "refresh=2", "trainer.steps=4", "name=killed"]
    env = {**os.environ, "TSCTL_NO_PROGRESS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tsctl", "ablate", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = runs / "default" / "killed" / "ratio=0"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (first / "metrics.jsonl").is_file() and len(steps(first)) >= 3:  # steps 0..2 logged, step 3 running
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((first / "manifest.json").read_text())["status"] == "running"

    again = tsctl("ablate", *args)
    assert "point ratio=0: resuming" in again.stderr
    for point in (first, first.parent / "ratio=50"):
        assert_point_done(point)
        assert steps(point) == list(range(5))


@pytest.mark.slow
def test_wandb_offline_writes_its_run_directory(micro, runs, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    tsctl("ablate", *in_runs(micro, runs), "ratio=50", "refresh=2", "logger=wandb", "name=wb")
    point = runs / "default" / "wb" / "point"
    assert_point_done(point)
    offline = sorted((point / "wandb").glob("offline-run-*"))
    assert offline, "no offline wandb run directory"
    assert all(any(run.glob("*.wandb")) for run in offline)
    images = [p.name for run in offline for p in (run / "files" / "media").rglob("*.png")]
    assert sorted(name.rsplit("_", 2)[0] for name in images) == sorted(p[:-4] for p in (*PLOTS, "attribution.png"))  # a seeded run adds attribution


@pytest.mark.slow
def test_a_two_by_two_sweep_reports_intervals_and_paired_verdicts(micro, runs):
    tsctl("ablate", *in_runs(micro, runs), "ratio=50,0", "seed=1,2", "trainer.steps=2", "report.baseline=ratio=0", "name=stats")
    sweep = runs / "default" / "stats"
    final = json.loads((sweep / "ratio=50-seed=1" / "final_eval.json").read_text())
    greedy, sampled = final["per_problem"]["greedy"], final["per_problem"]["sampled"]
    assert len(greedy["ids"]) == len(greedy["solved"]) == final["greedy_problems"] > 0
    assert final["greedy_accuracy"] == pytest.approx(sum(greedy["solved"]) / len(greedy["solved"]))
    assert len(sampled["ids"]) == len(sampled["solved"]) == final["sampled_problems"]
    assert final["pass@1"] == pytest.approx(sum(sampled["solved"]) / (sampled["samples"] * len(sampled["solved"])))
    rows = list(csv.DictReader((sweep / "report" / "summary.csv").open()))
    assert [r["point"] for r in rows] == ["ratio=0", "ratio=50"]
    assert all(r["greedy_accuracy_n"] == "2" and r["greedy_accuracy_ci_low"] != "" for r in rows)
    compared = list(csv.DictReader((sweep / "report" / "comparisons.csv").open()))
    greedy = next(r for r in compared if r["metric"] == "greedy_accuracy")
    assert greedy["point"] == "ratio=50" and greedy["baseline"] == "ratio=0" and greedy["seeds"] == "2"
    assert greedy["diff_by_problem"] != "" and greedy["verdict"] in ("better", "worse", "not distinguishable")
    assert (sweep / "report" / "reward_accuracy.png").stat().st_size > 10_000
    assert "95% Student-t confidence interval" in (sweep / "report" / "summary.md").read_text()
