"""``tsctl report``: grouping, mean ± std over seeds, failures, the written files, and one real run."""

import csv
import json
from pathlib import Path

import pytest
import yaml

from tsctl.report import find_runs, group_points, mean_std, report, summarize

STEPS = 10


def fake_run(folder: Path, ratio: int, seed: int, accuracy: float, status: str = "completed", pass_k: bool = True) -> Path:
    """A run folder as train + ablate write it, with synthetic metrics."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"ratio": ratio, "seed": seed, "name": folder.name, "trainer": {"steps": STEPS}}))
    (folder / "manifest.json").write_text(json.dumps({"status": status, **({"error": "RuntimeError: boom"} if status == "failed" else {})}))
    records = [{"step": 0, "eval/greedy_accuracy": 0.1, "eval/pass@1": 0.1}]
    for step in range(1, STEPS + 1):
        record = {"step": step, "reward/mean": step / STEPS, "entropy": 1.0, "entropy_by_source/plain": 1.0 - step / 100,
                  "entropy_by_pos/0-3": 1.2, "entropy_by_pos/4-7": 0.8, "clipped_by_source/plain": 0.01,
                  "clipped_by_source_pos/plain/0-3": 0.01, "clipped_by_source_pos/plain/4-7": 0.02}
        if ratio:
            record |= {"entropy_by_source/prefix": 0.9, "entropy_by_source/suffix": 0.5, "clipped_by_source/prefix": 0.2,
                       "clipped_by_source/suffix": 0.0, "clipped_by_source_pos/prefix/0-3": 0.3, "clipped_by_source_pos/suffix/4-7": 0.0}
        records.append(record)
    records[-1] |= {"eval/greedy_accuracy": accuracy, "eval/pass@1": accuracy / 2}
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if pass_k:
        (folder / "final_eval.json").write_text(json.dumps({"step": STEPS, "greedy_accuracy": accuracy, "pass@1": accuracy / 2, "pass@4": accuracy}))
    return folder


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """Two points (ratio 0 and 50) with two seeds each; one seed of ratio 50 failed."""
    root = tmp_path / "sweep-x"
    fake_run(root / "ratio=0-seed=1", 0, 1, 0.2)
    fake_run(root / "ratio=0-seed=2", 0, 2, 0.4)
    fake_run(root / "ratio=50-seed=1", 50, 1, 0.5)
    fake_run(root / "ratio=50-seed=2", 50, 2, 0.0, status="failed")
    return root


def test_points_group_seeds_and_average_completed_runs_only(sweep):
    points = group_points(find_runs(sweep))
    assert [p.label for p in points] == ["ratio=0", "ratio=50"]
    assert [len(p.runs) for p in points] == [2, 2] and [len(p.used) for p in points] == [2, 1]
    summary = summarize(points)
    assert summary.metrics[:3] == ["greedy_accuracy", "pass@1", "pass@4"]
    mean, std = summary.cells[0]["greedy_accuracy"]
    assert mean == pytest.approx(0.3) and std == pytest.approx(mean_std([0.2, 0.4])[1]) and std == pytest.approx(0.1414, abs=1e-4)
    assert summary.cells[1]["clipped_pct/prefix"][0] == pytest.approx(20.0)  # percent of tokens
    assert "clipped_pct/prefix" not in summary.cells[0]  # ratio 0 has no prefix tokens
    assert summary.cells[0]["entropy/plain"][0] == pytest.approx(0.90)  # mean over the last 10% of steps (step 10)


def test_report_writes_tables_and_plots_and_lists_the_failure(sweep):
    out = report(sweep, echo=False)
    assert out == sweep / "report"
    names = {p.name for p in out.iterdir()}
    assert {"summary.md", "summary.csv", "reward_accuracy.png", "entropy_by_position.png", "clip_by_position.png", "passk.png"} <= names
    md = (out / "summary.md").read_text()
    assert "| ratio=0 | 2/2 | 0.300 ± 0.141 |" in md
    assert "ratio=50-seed=2: failed — RuntimeError: boom" in md
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["ratio"] for r in rows] == ["0", "50"] and rows[1]["completed"] == "1"
    assert float(rows[0]["greedy_accuracy_mean"]) == pytest.approx(0.3)


def test_a_single_run_uses_its_metrics_without_final_eval(tmp_path):
    run = fake_run(tmp_path / "ratio0-seed0", 0, 0, 0.3, status="running", pass_k=False)
    out = report(run, echo=False)
    assert out == run / "plots"
    md = (out / "summary.md").read_text()
    assert "| ratio0-seed0 | 0/1 | 0.300 | 0.150 |" in md
    assert not (out / "passk.png").exists() and (out / "reward_accuracy.png").is_file()


def test_a_folder_without_runs_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a run folder nor a sweep folder"):
        find_runs(tmp_path)
