"""``tsctl ablate``: a micro sweep completes with a report, reruns skip, a killed point resumes, a failing
point is recorded without losing the others, wandb works offline, and ``tsctl report`` reads one run."""

import csv
import json
import re
import shlex
from pathlib import Path

import pytest

from conftest import kill, tsctl
from tsctl.config.errors import ConfigError
from tsctl.io.runs import open_run
from tsctl.stages.ablate import ablate, expand, plan, sweep_name
from tsctl.runconfig import compose_config

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


def test_a_sweep_of_seed_knobs_without_seeds_is_refused(tmp_path):
    where = f"runs_dir={tmp_path}"
    with pytest.raises(ConfigError, match="truncation.*ratio=0.*add ratio=25"):
        plan(["truncation=uniform,entropy", "refresh=5,20", where])
    with pytest.raises(ConfigError, match="seeds.selector"):
        plan(["ratio=0", "seeds.selector=latest,bandit", where])
    assert len(plan(["ratio=25", "truncation=uniform,entropy", where]).points) == 2
    assert len(plan(["ratio=0,25", "refresh=5", where]).points) == 2  # the ratio=25 point reads refresh
    with pytest.raises(ConfigError, match="points ratio=0-refresh=5 and ratio=0-refresh=20 of this sweep compose to the same run"):
        plan(["ratio=0,25", "refresh=5,20", where])  # at ratio=0 both refresh values are one run
    assert not list(tmp_path.iterdir())  # planning writes nothing

def test_the_readmes_slurm_recipe_trains_a_point_where_its_sweep_looks_for_it(tmp_path):
    """docs/scaling.md, "Sweeps on Slurm": a point trained on its own under torchrun must land in the folder that the
    `tsctl ablate` run after it reads, or the sweep trains every point again."""
    readme = (Path(__file__).resolve().parents[1] / "docs" / "scaling.md").read_text()
    section = readme[readme.index("**Sweeps on Slurm.**") :]
    train_block, ablate_block = re.findall(r"```bash\n(.*?)```", section, re.S)[:2]
    train = shlex.split(train_block.split("torchrun", 1)[1].replace("\\\n", " "))
    train = train[train.index("train") + 1 :]
    sweep_args = shlex.split(ablate_block)
    sweep_args = sweep_args[sweep_args.index("ablate") + 1 :]
    here = [f"task.file.train_path={tmp_path / 'data.jsonl'}", f"runs_dir={tmp_path}"]
    sweep = plan([o for o in sweep_args if not o.startswith("task.file.train_path=")] + here)
    cfg = compose_config([o for o in train if not o.startswith("task.file.train_path=")] + here).cfg
    point = "-".join(sorted(o for o in train if o.split("=", 1)[0] in sweep.swept))  # Hydra's folder name of the point
    assert sweep.swept == ["ratio", "seed"] and point == "ratio=25-seed=1"
    assert Path(cfg.runs_dir).absolute() / cfg.experiment / cfg.name == sweep.path / point


def test_a_failing_point_is_recorded_and_the_others_are_kept(tmp_path, monkeypatch):
    fails = [True]

    def fake_train(composed):
        run = open_run(composed.cfg, composed.node, "train")
        if composed.cfg.ratio == 50 and fails:
            run.close()  # as train does: the lock is let go before the error leaves it
            raise RuntimeError("diverged")
        run.append_metrics({"step": 1, "reward/mean": 0.5, "entropy": 1.0})
        run.set_status("completed")
        run.close()
        return run

    monkeypatch.setattr("tsctl.stages.train.train", fake_train)
    monkeypatch.setattr("tsctl.stages.ablate.final_eval", lambda cfg, run: {"step": 1, "greedy_accuracy": 0.5, "pass@1": 0.4})
    folder, failed = ablate([f"runs_dir={tmp_path}", "model=micro", "ratio=0,50", "name=s"])
    assert folder == tmp_path / "default" / "s" and failed == ["ratio=50"]
    assert json.loads((folder / "ratio=50" / "manifest.json").read_text())["error"] == "RuntimeError: diverged"
    assert (folder / "ratio=0" / "final_eval.json").is_file()
    summary = (folder / "report" / "summary.md").read_text()
    assert "| ratio=0 | 1/1 | 0.500 | 0.400 |" in summary and "ratio=50: failed — RuntimeError: diverged" in summary
    fails.clear()  # the rerun trains the failed point to the end: its error goes
    assert ablate([f"runs_dir={tmp_path}", "model=micro", "ratio=0,50", "name=s"])[1] == []
    assert "error" not in json.loads((folder / "ratio=50" / "manifest.json").read_text())


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
def test_a_point_killed_after_a_step_is_resumed(micro, runs):
    args = [*in_runs(micro, runs), "ratio=0,50", "refresh=2", "trainer.steps=4", "name=killed"]
    first = runs / "default" / "killed" / "ratio=0"
    kill(args, ("step-logged", 3), command="ablate")  # the first point's steps 0..3 logged, its step-4 not yet
    assert json.loads((first / "manifest.json").read_text())["status"] == "running"

    again = tsctl("ablate", *args)
    assert "point ratio=0: resuming" in again.stderr
    for point in (first, first.parent / "ratio=50"):
        assert_point_done(point)
        assert steps(point) == list(range(5))


@pytest.mark.slow
def test_wandb_offline_writes_its_run_directory(micro, runs, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    tsctl("ablate", *in_runs(micro, runs), "ratio=50", "refresh=2", "logger=wandb", "name=wb", process=True)  # wandb's service stays
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
    assert greedy["diff_by_problem"] != "" and greedy["verdict"] in ("better", "worse", "not distinguishable", "untested (no p-value)")
    assert (sweep / "report" / "reward_accuracy.png").stat().st_size > 10_000
    assert "95% Student-t confidence interval" in (sweep / "report" / "summary.md").read_text()
