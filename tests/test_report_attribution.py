"""The report's attribution section: seeded samples pooled per run by split, intervals over seeds, the two figures."""

import csv
import json
from pathlib import Path

import pytest
import yaml

from tsctl.analysis.report import report
from tsctl.analysis.attribution import attribution_rows, run_attribution
from tsctl.analysis.attribution_plots import arm_shares
from tsctl.analysis.points import find_runs, group_points


def seeded(**arms: tuple[float, float, float]) -> dict:
    """One step's metrics from ``arm<a>=(samples, accuracy, advantage)``; ``by_source/self`` pools them."""
    out, total = {}, [0.0, 0.0, 0.0]
    for name, (n, acc, adv) in arms.items():
        out |= {f"seeds/by_arm/{name[3:]}/samples": n, f"seeds/by_arm/{name[3:]}/accuracy": acc, f"seeds/by_arm/{name[3:]}/advantage": adv}
        total = [total[0] + n, total[1] + n * acc, total[2] + n * adv]
    n, acc, adv = total
    return out | {"seeds/by_source/self/samples": n, "seeds/by_source/self/accuracy": acc / n, "seeds/by_source/self/advantage": adv / n}


def fake_run(folder: Path, selector: str, seed: int, steps: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"seeds": {"selector": selector}, "seed": seed}))
    (folder / "manifest.json").write_text(json.dumps({"status": "completed"}))
    records = [{"step": i + 1, "reward/mean": 0.5, "entropy": 1.0, **s} for i, s in enumerate(steps)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "sweep"
    # seed 1: step 1 arm 0 (6 samples, acc 0.5, adv 0.2); step 2 arm 0 (2, 1.0, 1.0) and arm 1 (6, 0.0, -0.4)
    fake_run(root / "b-1", "bandit", 1, [seeded(arm0=(6, 0.5, 0.2)), seeded(arm0=(2, 1.0, 1.0), arm1=(6, 0.0, -0.4))])
    fake_run(root / "b-2", "bandit", 2, [seeded(arm0=(4, 0.25, 0.1)), seeded(arm1=(4, 0.5, 0.3))])
    fake_run(root / "l-1", "latest", 1, [seeded(arm0=(8, 0.5, 0.0)), seeded(arm0=(8, 0.5, 0.0))])
    fake_run(root / "l-2", "latest", 2, [{}, {}])  # no seeded sample (as ratio=0): no rows
    return root


def test_run_attribution_pools_steps_weighted_by_samples(sweep):
    got = run_attribution(find_runs(sweep)[0])
    # arm 0: 8 samples, accuracy (6*0.5 + 2*1)/8 = 0.625, advantage (6*0.2 + 2*1)/8 = 0.4, share 8/14; arm 1: 6/14, 0, -0.4
    assert got[("by_arm", "0")] == pytest.approx((8 / 14, 0.625, 0.4))
    assert got[("by_arm", "1")] == pytest.approx((6 / 14, 0.0, -0.4))
    assert got[("by_source", "self")] == pytest.approx((1.0, 5 / 14, (1.2 + 2.0 - 2.4) / 14))


def test_rows_are_intervals_over_seeds(sweep):
    points = group_points(find_runs(sweep))
    rows = attribution_rows(points)
    arm1 = next(r for r in rows if r.point.label == "seeds.selector=bandit" and r.split == "by_arm" and r.value == "1")
    # seed 1: -0.4, seed 2: 0.3 -> mean -0.05, std 0.49497
    assert arm1.advantage.mean == pytest.approx(-0.05) and arm1.advantage.std == pytest.approx(0.494975, abs=1e-6) and arm1.advantage.n == 2
    assert arm1.share.mean == pytest.approx((6 / 14 + 0.5) / 2)
    assert [(r.split, r.value) for r in rows if r.point.label == "seeds.selector=bandit"] == [("by_source", "self"), ("by_arm", "0"), ("by_arm", "1")]
    latest = [r for r in rows if r.point.label == "seeds.selector=latest"]
    assert [r.accuracy.n for r in latest] == [1, 1]  # the seed without seeded samples adds nothing


def test_report_writes_the_section_the_csv_and_the_figures(sweep):
    out = report(sweep, echo=False)
    text = (out / "summary.md").read_text()
    assert "## Seeded samples by source, arm, age and prefix length" in text
    assert "| seeds.selector=bandit | selector arm (windows old) | 1 | 0.464 ± 0.051" in text
    rows = list(csv.DictReader((out / "attribution.csv").open()))
    assert {(r["point"], r["split"], r["value"]) for r in rows} >= {("seeds.selector=bandit", "by_arm", "1"), ("seeds.selector=latest", "by_source", "self")}
    assert (out / "attribution.png").is_file() and (out / "arm_choices.png").is_file()
    assert "![arm_choices](arm_choices.png)" in text


def test_arm_shares_by_step_are_means_over_seeds(sweep):
    point = group_points(find_runs(sweep))[0]
    steps, arms, shares = arm_shares(point)
    assert list(steps) == [1, 2] and arms == ["0", "1"]
    # step 1: both seeds all arm 0; step 2: seed 1 2/8 arm 0, seed 2 all arm 1 -> arm 0 (0.25 + 0)/2, arm 1 (0.75 + 1)/2
    assert shares.ravel().tolist() == pytest.approx([1.0, 0.125, 0.0, 0.875])


def test_no_seeds_no_section(tmp_path):
    root = tmp_path / "plain"
    fake_run(root / "a", "latest", 1, [{}, {}])
    fake_run(root / "b", "latest", 2, [{}, {}])
    out = report(root, echo=False)
    assert "Where the gain" not in (out / "summary.md").read_text()
    assert not (out / "attribution.csv").exists() and not (out / "attribution.png").exists() and not (out / "arm_choices.png").exists()
