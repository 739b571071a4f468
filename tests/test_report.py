"""``tsctl report``: grouping, intervals over seeds, paired comparisons and verdicts, failures, the written files."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import tsctl
from tsctl.config.errors import ConfigError
from tsctl.analysis.report import report
from tsctl.analysis.compare import baseline_of, compare, default_baseline, problem_scores, summarize
from tsctl.analysis.points import find_runs, group_points

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
    cell = summary.cells[0]["greedy_accuracy"]
    # 0.2 and 0.4: mean 0.3, std 0.1414; t_{1, 0.975} = 12.7062 gives a half-width of 12.7062 * 0.1414 / sqrt(2) = 1.2706
    assert cell.mean == pytest.approx(0.3) and cell.std == pytest.approx(0.141421, abs=1e-6) and cell.n == 2
    assert (cell.low, cell.high) == pytest.approx((0.3 - 1.270620, 0.3 + 1.270620), abs=1e-5)
    assert summary.cells[1]["clipped_pct/prefix"].mean == pytest.approx(20.0)  # percent of tokens
    assert "clipped_pct/prefix" not in summary.cells[0]  # ratio 0 has no prefix tokens
    assert summary.cells[0]["entropy/plain"].mean == pytest.approx(0.90)  # mean over the last 10% of steps (step 10)


def test_report_writes_tables_and_plots_and_lists_the_failure(sweep):
    out = report(sweep, echo=False)
    assert out == sweep / "report"
    names = {p.name for p in out.iterdir()}
    assert {"summary.md", "summary.csv", "reward_accuracy.png", "entropy_by_position.png", "clip_by_position.png", "passk.png"} <= names
    md = (out / "summary.md").read_text()
    assert "| ratio=0 | 2/2 | 0.300 ± 0.141 [-0.971, 1.571] |" in md
    assert "ratio=50-seed=2: failed — RuntimeError: boom" in md
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [r["ratio"] for r in rows] == ["0", "50"] and rows[1]["completed"] == "1"
    assert float(rows[0]["greedy_accuracy_mean"]) == pytest.approx(0.3)
    assert float(rows[0]["greedy_accuracy_ci_low"]) == pytest.approx(-0.97062, abs=1e-4) and rows[0]["greedy_accuracy_n"] == "2"
    assert rows[1]["greedy_accuracy_ci_low"] == ""  # one completed run: no interval


def test_runs_of_different_code_revisions_are_named_in_a_warning(sweep, capsys):
    report(sweep, echo=False)
    assert "Warning" not in (sweep / "report" / "summary.md").read_text()  # no revision recorded: one (unknown) code
    for name, revision in (("ratio=0-seed=1", "90b822ddba39"), ("ratio=0-seed=2", "90b822ddba39"), ("ratio=50-seed=1", "02f413e0aa11")):
        manifest = sweep / name / "manifest.json"
        manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"git_revision": revision}))
    report(sweep)
    expected = "the runs ran 2 revisions of the code: 02f413e (1 run), 90b822d (2 runs) (manifest.json, git_revision)"
    assert f"**Warning: runs of different code.** {expected}" in (sweep / "report" / "summary.md").read_text()
    assert f"warning: runs of different code: {expected}" in " ".join(capsys.readouterr().err.split())  # the console writes to stderr


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


def paired_run(folder: Path, settings: dict, seed: int, solved: list[int], sampled: list[int], samples: int = 4) -> Path:
    """A completed run whose final evaluation holds per-problem results (ids p0..p{P-1})."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({**settings, "seed": seed, "trainer": {"steps": STEPS}}))
    (folder / "manifest.json").write_text(json.dumps({"status": "completed"}))
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"{k}={v}" for k, v in settings.items()] + [f"seed={seed}"]))
    records = [{"step": s, "reward/mean": 0.5, "entropy": 1.0, "entropy_by_source/plain": 0.5 + 0.01 * seed} for s in range(1, STEPS + 1)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    ids = [f"p{i}" for i in range(len(solved))]
    per_problem = {"greedy": {"ids": ids, "solved": solved}, "sampled": {"ids": ids, "solved": sampled, "samples": samples}}
    final = {"step": STEPS, "greedy_accuracy": sum(solved) / len(solved), "pass@1": sum(sampled) / (samples * len(sampled)), "per_problem": per_problem}
    (folder / "final_eval.json").write_text(json.dumps(final))
    return folder


@pytest.fixture
def paired_sweep(tmp_path: Path) -> Path:
    """ratio 0 and 25, three seeds each, 200 problems; ratio 25 solves 30 more problems greedily under every seed."""
    root = tmp_path / "sweep-p"
    rng = np.random.default_rng(5)
    for seed in (1, 2, 3):
        base = (rng.random(200) < 0.3).astype(int)
        better = base.copy()
        better[np.flatnonzero(base == 0)[:30]] = 1
        sampled = rng.integers(0, 5, 200)
        paired_run(root / f"ratio=0-seed={seed}", {"ratio": 0}, seed, base.tolist(), sampled.tolist())
        paired_run(root / f"ratio=25-seed={seed}", {"ratio": 25}, seed, better.tolist(), sampled.tolist())
    return root


def test_paired_comparison_by_seed_and_by_problem(paired_sweep):
    summary = summarize(group_points(find_runs(paired_sweep)))
    rows = {r.metric: r for r in compare(summary, {"ratio": "0"})}
    greedy = rows["greedy_accuracy"]
    assert greedy.point.label == "ratio=25" and greedy.baseline.label == "ratio=0" and greedy.seeds == ["1", "2", "3"]
    assert greedy.by_seed.diff.mean == pytest.approx(30 / 200)  # every seed gains exactly 30 of 200 problems
    assert greedy.by_seed.diff.std == 0 and greedy.by_seed.p_value == 0.0
    assert greedy.by_problem is not None and greedy.by_problem.diff.mean == pytest.approx(0.15)
    assert 0 < greedy.by_problem.diff.low < 0.15 < greedy.by_problem.diff.high and greedy.verdict == "better"
    same = rows["pass@1"]  # identical samples under both settings
    assert same.by_problem.diff.mean == 0 and same.by_problem.p_value == 1.0 and same.verdict == "not distinguishable"
    entropy = rows["entropy/plain"]
    assert entropy.by_problem is None and entropy.verdict == "not distinguishable"


def test_per_problem_pass_at_k_is_the_unbiased_estimator_of_each_problem_s_samples(tmp_path):
    run = find_runs(paired_run(tmp_path / "r", {"ratio": 0}, 0, [1, 0, 0, 1], [0, 1, 2, 4]))[0]
    ids, pass_2 = problem_scores(run, "pass@2")
    # 4 samples, c solved: 1 - C(4 - c, 2) / C(4, 2) = 0, 1 - 3/6, 1 - 1/6, 1
    assert ids == ["p0", "p1", "p2", "p3"] and pass_2 == pytest.approx([0.0, 0.5, 5 / 6, 1.0])
    assert problem_scores(run, "pass@1")[1] == pytest.approx([0.0, 0.25, 0.5, 1.0])
    assert problem_scores(run, "pass@4")[1] == pytest.approx([0.0, 1.0, 1.0, 1.0])
    assert problem_scores(run, "pass@8") is None  # more than the 4 samples drawn
    assert problem_scores(run, "greedy_accuracy")[1] == pytest.approx([1, 0, 0, 1])


def test_report_writes_interval_columns_comparisons_and_a_band_plot(paired_sweep, capsys):
    out = report(paired_sweep, echo=True, baseline="ratio=0")
    md = (out / "summary.md").read_text()
    assert "## Paired comparisons against ratio=0" in md and "| ratio=25 | ratio=0 | held-out greedy acc. | 3 |" in md
    rows = list(csv.DictReader((out / "comparisons.csv").open()))
    greedy = next(r for r in rows if r["metric"] == "greedy_accuracy")
    assert greedy["verdict"] == "better" and float(greedy["diff_by_problem"]) == pytest.approx(0.15)
    # 3 comparisons in the table's family; greedy's gain is 0.15 under every seed, but on other problems under each
    # (the problems disagree beyond their cells' noise), so its p over seeds and problems is small, not 0; pass@1's
    # identical samples give p = 1
    assert float(greedy["p_holm"]) < 1e-9 and next(r for r in rows if r["metric"] == "pass@1")["p_holm"] == "1"
    assert greedy["mde_80_by_seed"] == "0" and greedy["p_equivalence"] == ""  # no spread over seeds; no margin given
    bounds = md.split("What each comparison rules out:")[1]
    assert "| ratio=25 | held-out greedy acc. | [+0." in bounds and "(seeds and problems) | better | rules out gains > 0." in bounds
    assert "| ratio=25 | held-out pass@1 | [+0.000, +0.000] (seeds and problems) | not distinguishable | rules out gains > 0.000 / losses > 0.000 | 0.000 |" in bounds
    assert "no equivalence test was run" in md
    assert {"greedy_accuracy_ci_low", "greedy_accuracy_ci_high", "pass@1_n"} <= set(next(csv.DictReader((out / "summary.csv").open())))
    assert (out / "reward_accuracy.png").is_file()
    printed = capsys.readouterr().err  # the console writes to stderr
    assert "Paired against ratio=0" in printed and "better" in printed and "p (Holm)" in printed and "rules out gains >" in printed


def test_a_ratio_sweep_s_report_assesses_the_method_s_claims(paired_sweep, capsys):
    out = report(paired_sweep, echo=True)
    md = (out / "summary.md").read_text()
    claims = md.split("## The Thinking Seeds claims, as these runs see them")[1]
    # entropy is 1.0 at every step of every run: no fall, no seeded gain; no run logs clipped prefix tokens
    assert "- (i) Under plain on-policy training (ratio=0) entropy falls over training, and along the response position, more so as training goes on: **not supported**: 0 of 1" in claims
    assert "- (ii) Prefix tokens are clipped far more often than suffix tokens: **pending**" in claims
    # ratio 25 solves 30 more of 200 problems greedily (better); its sampled results equal ratio 0's
    assert "- (iii) Every ratio > 0 beats ratio 0 on held-out accuracy and pass@k: **partly supported**: 1 of 2 comparison(s) say better" in claims
    greedy = next(line for line in claims.splitlines() if line.startswith("  - ratio=25 vs ratio=0, greedy_accuracy: "))
    assert "difference +0.150 [95% CI +0." in greedy and "(seeds and problems), p=" in greedy and ": **better**; rules out gains > 0." in greedy
    # every seed gains exactly 30 of 200 problems: the paired differences do not spread, so any difference is detectable
    assert greedy.endswith("and any loss; MDE 0.000 (80% power, paired t over seeds).")
    assert "- (iv) Seeded runs keep a higher entropy: **not supported**: 0 of 1 comparison(s) say higher" in claims
    console = " ".join(capsys.readouterr().err.split())
    assert "(iii) Every ratio > 0 beats ratio 0 on held-out accuracy and pass@k: partly supported: 1 of 2" in console


def test_a_sweep_of_another_key_has_no_claims_section(tmp_path):
    for seed in (1, 2):
        paired_run(tmp_path / "s" / f"refresh=5-seed={seed}", {"refresh": 5}, seed, [1, 0], [1, 2])
        paired_run(tmp_path / "s" / f"refresh=10-seed={seed}", {"refresh": 10}, seed, [1, 1], [2, 2])
    assert "Thinking Seeds claims" not in (report(tmp_path / "s", echo=False) / "summary.md").read_text()


def test_default_baseline_is_the_first_swept_value_as_written(paired_sweep):
    points = group_points(find_runs(paired_sweep))
    assert default_baseline(paired_sweep, points) == {"ratio": "0"}  # no multirun.yaml: the first point
    (paired_sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": ["ratio=25,0", "seed=1,2,3"]}}}))
    assert default_baseline(paired_sweep, points) == {"ratio": "25"}
    rows = compare(summarize(points), default_baseline(paired_sweep, points))
    assert {r.point.label for r in rows} == {"ratio=0"} and next(r for r in rows if r.metric == "greedy_accuracy").verdict == "worse"


def test_baseline_matches_the_point_with_the_other_settings_equal(tmp_path):
    root = tmp_path / "sweep-2d"
    for ratio in (0, 25):
        for refresh in (5, 10):
            for seed in (1, 2):
                paired_run(root / f"ratio={ratio}-refresh={refresh}-seed={seed}", {"ratio": ratio, "refresh": refresh}, seed, [1, 0], [2, 2])
    points = group_points(find_runs(root))
    by_label = {p.label: p for p in points}
    assert baseline_of(by_label["ratio=25 refresh=5"], points, {"ratio": "0"}).label == "ratio=0 refresh=5"
    assert baseline_of(by_label["ratio=25 refresh=10"], points, {"ratio": "0"}).label == "ratio=0 refresh=10"
    assert baseline_of(by_label["ratio=0 refresh=10"], points, {"ratio": "0"}) is None
    with pytest.raises(ConfigError, match="matches no point"):
        report(root, echo=False, baseline="ratio=50")


@pytest.mark.slow
def test_cli_takes_the_baseline_unquoted_and_refuses_other_keys(paired_sweep):
    done = tsctl("report", str(paired_sweep), "report.baseline=ratio=25", "report.level=0.9")
    assert "Paired against ratio=25" in done.stderr and "90% CI" in done.stderr
    rows = list(csv.DictReader((paired_sweep / "report" / "comparisons.csv").open()))
    assert {r["point"] for r in rows} == {"ratio=0"} and {r["baseline"] for r in rows} == {"ratio=25"}
    assert {r["p_equivalence"] for r in rows} == {""}
    tsctl("report", str(paired_sweep), "report.equivalence_margin=0.5")  # the key reaches the report
    rows = list(csv.DictReader((paired_sweep / "report" / "comparisons.csv").open()))
    held_out = {r["metric"]: r for r in rows if r["metric"] in ("greedy_accuracy", "pass@1")}
    assert all(r["p_equivalence"] != "" for r in held_out.values()) and held_out["pass@1"]["verdict"] == "equivalent within ±0.5"
    wrong = tsctl("report", str(paired_sweep), "ratio=25", check=False)
    assert wrong.returncode == 2 and "only report.* overrides" in wrong.stderr and "Traceback" not in wrong.stderr
    bad = tsctl("report", str(paired_sweep), "report.baseline=ratio=7", check=False)
    assert bad.returncode == 2 and "matches no point" in bad.stderr and "ratio=0, ratio=25" in bad.stderr


def test_runs_from_different_built_in_models_are_named_in_a_warning(sweep):
    def started_from(name: str, digest: str) -> None:
        manifest = sweep / name / "manifest.json"
        manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"base_model": {"path": "m", "weights_sha256": digest}}))

    started_from("ratio=0-seed=1", "aaaaaaaaaaaa")
    started_from("ratio=50-seed=1", "aaaaaaaaaaaa")
    report(sweep, echo=False)
    assert "Warning" not in (sweep / "report" / "summary.md").read_text()  # one known model; runs without a digest left aside
    started_from("ratio=0-seed=2", "bbbbbbbbbbbb")
    report(sweep, echo=False)
    expected = ("**Warning: runs from different base models.** the runs started from 2 different built-in models: "
                "aaaaaaaaaaaa (2 runs), bbbbbbbbbbbb (1 run) (manifest.json, base_model.weights_sha256)")
    assert expected in (sweep / "report" / "summary.md").read_text()


def test_runs_of_different_arithmetic_are_named_in_a_warning(sweep):
    def ran_with(name: str, threads: int) -> None:
        manifest = sweep / name / "manifest.json"
        arithmetic = {"device": "cpu", "cpu_capability": "AVX2", "torch_threads": threads}
        manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"arithmetic": arithmetic}))

    ran_with("ratio=0-seed=1", 1)
    ran_with("ratio=50-seed=1", 1)
    report(sweep, echo=False)
    assert "Warning" not in (sweep / "report" / "summary.md").read_text()  # one arithmetic; runs without one left aside
    ran_with("ratio=0-seed=2", 2)
    report(sweep, echo=False)
    expected = ("**Warning: runs of different arithmetic.** the runs ran with 2 different arithmetics: cpu AVX2, 1 thread "
                "(2 runs), cpu AVX2, 2 threads (1 run) (manifest.json, arithmetic)")
    assert expected in (sweep / "report" / "summary.md").read_text()
