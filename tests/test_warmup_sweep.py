"""Warm-up models as a random unit in ``tsctl report``: a sweep over ``model.warmup.seed`` pairs runs by warm-up model
and seed, tests with the warm-up models random and the seeds nested in them (:mod:`tsctl.analysis.nested`), and says
so in each table with the variance components; a sweep from one warm-up model says that model is fixed. End to end,
``tsctl ablate`` warms up one model per warm-up seed and the report shows the nested design."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import tsctl
from test_report import paired_run
from tsctl.analysis.compare import compare, summarize
from tsctl.analysis.nested import nested_difference, variance_components
from tsctl.analysis.points import find_runs, group_points
from tsctl.analysis.report import report
from tsctl.analysis.stats import paired_difference

DIGESTS = ("aaaaaaaaaaaa", "bbbbbbbbbbbb")
PROBLEMS = 40


def started_from(run: Path, digest: str) -> None:
    """Record in the run's manifest that it started from the built-in weights ``digest``."""
    manifest = run / "manifest.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"base_model": {"path": "m", "weights_sha256": digest}}))


def warmup_sweep(root: Path, seeds: tuple[int, ...] = (1, 2), gains: tuple[int, int] = (3, 9)) -> dict:
    """Ratio 0 and 25 from two warm-up models (``model.warmup.seed`` 0 and 1), ``seeds`` each, over 40 problems: ratio
    25 solves ``gains[w]`` more problems greedily than ratio 0 under warm-up model ``w``; returns the greedy scores
    ``{(ratio, warm-up, seed): [P]}``."""
    rng = np.random.default_rng(4)
    scores = {}
    for w, digest in enumerate(DIGESTS):
        for seed in seeds:
            base = (rng.random(PROBLEMS) < 0.3).astype(int)
            better = base.copy()
            better[np.flatnonzero(base == 0)[: gains[w] + seed]] = 1
            sampled = rng.integers(0, 5, PROBLEMS)
            for ratio, solved in ((0, base), (25, better)):
                run = paired_run(root / f"model.warmup.seed={w}-ratio={ratio}-seed={seed}", {"model.warmup.seed": w, "ratio": ratio},
                                 seed, solved.tolist(), sampled.tolist())
                started_from(run, digest)
                scores[ratio, w, seed] = solved.astype(float)
    return scores


def test_runs_pair_by_warm_up_model_and_seed_and_the_warm_up_models_are_random(tmp_path):
    scores = warmup_sweep(tmp_path / "s")
    points = group_points(find_runs(tmp_path / "s"))
    assert [p.label for p in points] == ["ratio=0", "ratio=25"]  # the warm-up seed is a unit, like the training seed
    assert sorted(r.warmup for r in points[0].used) == ["0", "0", "1", "1"]
    rows = {r.metric: r for r in compare(summarize(points), {"ratio": "0"})}
    greedy = rows["greedy_accuracy"]
    assert (greedy.warmups, greedy.seeds, greedy.problems) == (2, ["1", "2", "1", "2"], PROBLEMS)
    table = {r: np.stack([[scores[r, w, s] for s in (1, 2)] for w in (0, 1)]) for r in (0, 25)}  # [W, S, P]
    expected = nested_difference(table[25], table[0])
    assert greedy.by_problem == expected and greedy.by_problem.method == "warm-ups, seeds and problems"
    # gains 4, 5 of 40 under warm-up 0 and 10, 11 under warm-up 1: warm-up means 0.1125 and 0.2625
    by_warmup = paired_difference([0.1125, 0.2625], [0.0, 0.0])
    assert greedy.by_seed.diff.mean == pytest.approx(0.1875) and greedy.by_seed.diff.n == 2
    assert (greedy.by_seed.diff.low, greedy.by_seed.p_value) == pytest.approx((by_warmup.diff.low, by_warmup.p_value))
    assert greedy.components == variance_components(table[25] - table[0])
    assert greedy.how == "warm-ups, seeds and problems" and rows["entropy/plain"].how == "2 warm-up models"
    # the summary's interval of a point is over its warm-up models' means (n = 2)
    assert summarize(points).cells[1]["greedy_accuracy"].n == 2


def test_the_report_says_the_nested_design_and_prints_the_variance_components(tmp_path, capsys):
    warmup_sweep(tmp_path / "s")
    out = report(tmp_path / "s", echo=True, baseline="ratio=0")
    md = (out / "summary.md").read_text()
    heading = "warm-up models random (2), seeds nested (2 each), crossed with problems (40)"
    assert f"## Paired comparisons against ratio=0: {heading}" in md
    assert f"Variance components of each difference ({heading}):" in md
    assert "| point | metric | warm-up model | training seed | problem | warm-up × problem | residual |" in md
    assert "| ratio=25 | ratio=0 | held-out greedy acc. | 2×2 |" in md and "MDE (80% power, by warm-up model)" in md
    assert "runs pair by warm-up model and seed" in md and "not estimable from one warm-up model" not in md
    assert "Warning" not in md  # every point trained the same seeds from the same two models: no mixed-models warning
    rows = list(csv.DictReader((out / "comparisons.csv").open()))
    greedy = next(r for r in rows if r["metric"] == "greedy_accuracy")
    assert greedy["warmup_models"] == "2" and float(greedy["var_warmup"]) > 0 and greedy["var_residual"] != ""
    printed = " ".join(capsys.readouterr().err.split())
    assert f"Paired against ratio=0 ({heading};" in printed and "smallest effect the warm-up models could detect" in printed
    assert "Variance components (" in printed
    started_from(tmp_path / "s" / "model.warmup.seed=0-ratio=25-seed=2", "cccccccccccc")  # warm-up seed 0 gave other weights there
    md = (report(tmp_path / "s", echo=False) / "summary.md").read_text()
    assert ("**Warning: runs from different base models.** the runs started from 3 different built-in models: aaaaaaaaaaaa "
            "(3 runs), bbbbbbbbbbbb (4 runs), cccccccccccc (1 run)") in md


def test_a_sweep_from_one_warm_up_model_says_it_is_fixed_and_keeps_its_numbers(tmp_path):
    rng = np.random.default_rng(6)
    for seed in (1, 2, 3):
        solved, sampled = (rng.random(PROBLEMS) < 0.4).astype(int).tolist(), rng.integers(0, 5, PROBLEMS).tolist()
        for ratio, shift in ((0, 0), (25, 1)):  # ratio 25's scores: ratio 0's shifted by one problem
            run = paired_run(tmp_path / "s" / f"ratio={ratio}-seed={seed}", {"ratio": ratio}, seed, solved[shift:] + solved[:shift], sampled)
            started_from(run, DIGESTS[0])
    out = report(tmp_path / "s", echo=False)
    md = (out / "summary.md").read_text()
    assert "## Paired comparisons against ratio=0: warm-up model fixed (one), training seeds (3), crossed with problems (40)" in md
    assert "Warm-up variance is not estimable from one warm-up model" in md
    assert "| ratio=25 | ratio=0 | held-out greedy acc. | 3 |" in md and "MDE (80% power, by seed)" in md
    greedy = next(r for r in csv.DictReader((out / "comparisons.csv").open()) if r["metric"] == "greedy_accuracy")
    assert greedy["warmup_models"] == "1" and greedy["var_warmup"] == "" and greedy["var_seed"] != ""


def test_an_unbalanced_design_uses_each_warm_up_model_s_first_seeds(tmp_path):
    warmup_sweep(tmp_path / "s", seeds=(1, 2, 3))
    (tmp_path / "s" / "model.warmup.seed=1-ratio=25-seed=2" / "manifest.json").write_text(json.dumps(
        {"status": "failed", "base_model": {"path": "m", "weights_sha256": DIGESTS[1]}}))
    rows = compare(summarize(group_points(find_runs(tmp_path / "s"))), {"ratio": "0"})
    greedy = next(r for r in rows if r.metric == "greedy_accuracy")
    assert greedy.warmups == 2 and greedy.seeds == ["1", "2", "1", "3"]  # warm-up 1 paired seeds 1 and 3 only


@pytest.mark.slow
def test_ablate_warms_up_a_model_per_warm_up_seed_and_the_report_shows_the_nested_design(micro, tmp_path):
    # two short warm-ups (3000 examples: about 8 s each) and eight runs of two steps
    tsctl("ablate", *micro, "model.warmup.seed=0,1", "model.warmup.examples=3000", "model.warmup.eval_problems=8", "ratio=0,25", "seed=1,2",
          "trainer.steps=2", "name=warmups")
    sweep = tmp_path / "runs" / "default" / "warmups"
    manifests = {p.name: json.loads((p / "manifest.json").read_text()) for p in sweep.iterdir() if (p / "manifest.json").is_file()}
    assert len(manifests) == 8 and all(m["status"] == "completed" for m in manifests.values())
    digests = {name: m["base_model"]["weights_sha256"] for name, m in manifests.items()}
    by_warmup = [{d for name, d in digests.items() if name.startswith(f"model.warmup.seed={w}-")} for w in (0, 1)]
    assert all(len(d) == 1 for d in by_warmup) and by_warmup[0] != by_warmup[1]  # each point started from its own warm-up
    assert len({m["base_model"]["path"] for m in manifests.values()}) == 2
    md = (sweep / "report" / "summary.md").read_text()
    assert "## Paired comparisons against ratio=0: warm-up models random (2), seeds nested (2 each), crossed with problems (" in md
    assert "| point | metric | warm-up model | training seed | problem | warm-up × problem | residual |" in md
    assert "| ratio=25 | held-out greedy acc. |" in md.split("Variance components of each difference")[1]
    compared = list(csv.DictReader((sweep / "report" / "comparisons.csv").open()))
    assert {r["warmup_models"] for r in compared} == {"2"} and {r["seeds"] for r in compared} == {"4"}
