"""``scripts/results.py``'s sections built from arms: the warm-up row, the primary family declared before the runs,
the exploratory families, one verdict per comparison wherever it is shown, and the pass@k trajectory."""

import json
from pathlib import Path

import pytest

from test_results_page import results, write_run  # noqa: F401  (the fixture)
from tsctl.io.run_records import save_record

DIGEST = "d1d1d1d1d1d1"
RATIO0 = (0.30, 0.32, 0.34)
"""Held-out pass@8 of the ratio 0 arm by seed; ratio 25 is 0.02, 0.03 and 0.025 higher."""
RATIO25 = tuple(a + d for a, d in zip(RATIO0, (0.02, 0.03, 0.025)))


def arm_run(folder: Path, overrides: list[str], seed: int, pass8: float) -> None:
    """A finished run of a results sweep that started from the warm-up ``DIGEST``, with held-out pass@8 ``pass8``."""
    records = [{"step": s, "reward/mean": 0.3, "entropy": 0.2} for s in range(1, 11)]
    write_run(folder, {"seed": seed, "task": {"name": "countdown"}}, [*overrides, "task=countdown", f"seed={seed}"], records, 0.3)
    (folder / "final_eval.json").write_text(json.dumps({"greedy_accuracy": 0.3, "pass@1": pass8 / 3, "pass@8": pass8}))
    manifest = {"status": "completed", "base_model": {"path": "m", "weights_sha256": DIGEST}}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def warmup_record(figures: Path, seed: int, pass8: float) -> None:
    """The warm-up model's score with sampling seed ``seed``, as ``results_scoring.score_warmup`` records it."""
    folder = figures.parent / "scratch" / f"seed={seed}"
    write_run(folder, {"seed": seed, "task": {"name": "countdown"}}, [], [], 0.35)
    (folder / "final_eval.json").write_text(json.dumps({"greedy_accuracy": 0.35, "pass@1": 0.3, "pass@8": pass8}))
    (folder / "manifest.json").write_text(json.dumps({"status": "completed", "scored": "warm-up", "base_model": {"weights_sha256": DIGEST}}))
    save_record(folder, figures / "warmup" / f"countdown-{DIGEST}" / f"seed={seed}")


@pytest.fixture
def controls(results, tmp_path):  # noqa: F811
    """Three seeds of every arm of the controls section: the controls with seeds score as ratio 25, the KL arm as
    ratio 0; one seed of the dose section's lr 1e-4 arms; the warm-up at pass@8 0.7."""
    runs = tmp_path / "runs" / "results"
    for seed in range(3):
        arm_run(runs / "countdown-collapse-base" / f"ratio=0-seed={seed}", ["ratio=0"], seed, RATIO0[seed])
        arm_run(runs / "countdown-collapse-base" / f"ratio=25-seed={seed}", ["ratio=25"], seed, RATIO25[seed])
        for sweep in ("refresh10", "no-prefix-grad", "warmup-seeds"):
            arm_run(runs / f"countdown-collapse-{sweep}" / f"seed={seed}", [], seed, RATIO25[seed])
        arm_run(runs / "countdown-collapse-kl" / f"seed={seed}", [], seed, RATIO0[seed])
        warmup_record(tmp_path / "figures", seed, 0.7)
    return results.render(tmp_path / "runs")


def section_of(page: str, title: str) -> str:
    return page.split(f"## {title}")[1].split("\n## ")[0]


def test_the_controls_section_has_its_warm_up_row_and_decides_only_its_declared_family(controls):
    section = section_of(controls, "Where plain DAPO degrades")
    assert "Its primary comparisons, declared before its runs (one Holm family of 9): ratio 25 against ratio 0 on pass@8;" in section
    assert "| warm-up | 3/3 | 0.350 ± 0.000 [0.350, 0.350] |" in section
    primary = section.split("The primary comparisons (9 of 9 with runs so far):")[1].split("What each rules out:")[0]
    assert primary.count("\n| ratio") == 9
    # ratio 25 minus ratio 0 by seed: 0.02, 0.03, 0.025: t = 8.660 on 2 degrees of freedom, p = 0.01307; so for the three
    # controls with seeds against ratio 0 and the KL arm against ratio 25 (the same differences, negated); the other four
    # differ by 0 on every seed (p = 1). Holm over 9: the five equal p-values take 9 x 0.01307 = 0.1176, the rest 1.
    assert primary.count("| 0.013 |") == 5 and primary.count("| 0.118 | not distinguishable |") == 5
    assert primary.count("| 1.000 | 1.000 | not distinguishable |") == 0 and primary.count("| 1.000 | not distinguishable |") == 4
    assert "Exploratory: each arm against the warm-up model it started from" in section
    # every arm's pass@8 is below the warm-up's 0.7 on every seed: ratio 0 by 0.4, 0.38, 0.36
    against = section.split("Exploratory: each arm against the warm-up")[1].split("What each rules out:")[0]
    assert "| ratio 0 | warm-up | held-out pass@8 | 3 | 0.320 | 0.700 | -0.380 |" in against


def test_a_comparison_keeps_the_verdict_of_the_family_it_is_primary_in(controls):
    dose = section_of(controls, "Dose-response")
    row = next(line for line in dose.splitlines() if line.startswith("| lr 2e-4, ratio 25 | lr 2e-4, ratio 0 |"))
    assert "| +0.025 [+0.013, +0.037] | 0.118 | not distinguishable | countdown-collapse-controls |" in row
    # the baseline arm against the warm-up: -0.40, -0.38, -0.36 by seed, std 0.02: -0.38 -+ 4.303 * 0.02 / sqrt(3)
    assert row.endswith("| -0.380 [-0.430, -0.330] |")
    assert "The primary comparisons (0 of 2 with runs so far)" not in dose  # no family table without runs


def test_trajectory_scores_are_shown_by_step_with_the_warm_up_as_step_0(results, tmp_path):  # noqa: F811
    runs = tmp_path / "runs" / "results"
    for seed in range(2):
        for ratio, values in ((0, RATIO0), (25, RATIO25)):
            arm_run(runs / "countdown-collapse-base" / f"ratio={ratio}-seed={seed}", [f"ratio={ratio}"], seed, values[seed])
            folder = tmp_path / "figures" / "countdown-collapse-base" / "trajectory" / f"ratio={ratio}-seed={seed}"
            folder.mkdir(parents=True)
            for step, value in ((25, 0.5 + 0.01 * seed), (50, values[seed])):
                (folder / f"step-{step:06d}.json").write_text(json.dumps({"step": step, "pass@8": value}))
        warmup_record(tmp_path / "figures", seed, 0.7 + 0.01 * seed)
    section = section_of(results.render(tmp_path / "runs"), "Where plain DAPO degrades")
    table = section.split("Every kept checkpoint of the ratio 0, ratio 25 runs")[1]
    assert "| 0 (warm-up) | 0.705 ± 0.007 [0.641, 0.769] | 0.705 ± 0.007 [0.641, 0.769] |" in table
    assert "| 25 | 0.505 ± 0.007 [0.441, 0.569] | 0.505 ± 0.007 [0.441, 0.569] |" in table
    assert "| 50 | 0.310 ± 0.014 [0.183, 0.437] | 0.335 ± 0.021 [0.144, 0.526] |" in table
    assert (tmp_path / "figures" / "countdown-collapse-controls" / "trajectory_pass8.png").is_file()


def test_a_claim_made_of_table_rows_keeps_the_table_s_verdict(results, tmp_path):  # noqa: F811
    sweep = tmp_path / "runs" / "results" / "countdown-ratio"
    for seed in range(3):
        for ratio, gain in ((0, 0.0), (25, (0.02, 0.03, 0.025)[seed])):
            records = [{"step": s, "entropy": 0.3, "entropy_by_source/plain": 0.3} for s in range(1, 11)]
            write_run(sweep / f"ratio={ratio}-seed={seed}", {"ratio": ratio, "seed": seed}, [f"ratio={ratio}", f"seed={seed}"],
                      records, 0.40 + 0.01 * seed + gain)
    page = results.render(tmp_path / "runs")
    # the table compares greedy, pass@1 (p = 0.01307 each, as by hand in test_results_page) and the plain samples'
    # entropy (the same on every seed: p = 1): Holm over its 3 gives 3 x 0.01307 = 0.0392 to both gains, not the
    # 2 x 0.01307 of the claim's two comparisons alone; the claim says the table's
    table = section_of(page, "Countdown: off-policy ratio").split("Paired against ratio=0:")[1]
    assert table.count("| 0.039 | better |") == 2
    claims = page.split("## The method's claims")[1].split("\n## ")[0]
    greedy = next(line for line in claims.splitlines() if "greedy_accuracy: 0.435 vs 0.410" in line)
    assert "p=0.0131, Holm p=0.0392 (the comparison table's family): **better**" in greedy


def test_the_metrics_of_the_whole_training_by_hand(tmp_path):
    from tsctl.analysis.points import load_run, training_values

    # two steps of 8 samples, 10 tokens each, three quarters generated (plain 0.5 + suffix 0.25): 60 a step; groups
    # without reward variance 0.5 and 0.25: mean 0.375, and 8 * 0.5 + 8 * 0.75 = 10 samples of groups with advantage
    records = [{"step": s, "entropy": 0.2, "samples": 8, "response_length/mean": 10.0, "tokens_by_source/plain": 0.5,
                "tokens_by_source/suffix": 0.25, "tokens_by_source/prefix": 0.25, "zero_variance_groups": z} for s, z in ((1, 0.5), (2, 0.25))]
    write_run(tmp_path / "run", {"seed": 0}, ["seed=0"], records, 0.3)
    assert training_values(load_run(tmp_path / "run")) == {"zero_variance_groups": 0.375, "tokens_per_useful_sample": 12.0}


def test_the_controller_section_compares_the_groups_without_reward_variance_first(results, tmp_path):  # noqa: F811
    runs = tmp_path / "runs" / "results"
    for seed in range(3):
        for folder, overrides, zero in (("countdown-collapse-base/ratio=0-seed", ["ratio=0"], 0.6), ("countdown-collapse-base/ratio=25-seed", ["ratio=25"], 0.5),
                                        ("countdown-collapse-controller/seed", [], 0.5 - (0.1, 0.2, 0.15)[seed])):
            run = runs / f"{folder}={seed}"
            arm_run(run, overrides, seed, 0.3)
            lines = [json.dumps({"step": s, "entropy": 0.2, "samples": 8, "response_length/mean": 10.0, "tokens_by_source/plain": 1.0,
                                 "zero_variance_groups": zero}) for s in range(1, 3)]
            (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    section = section_of(results.render(tmp_path / "runs"), "The seed controller where plain DAPO degrades")
    assert "| ratio 25, seed controller | 0.350 ± 0.050 [0.226, 0.474] |" in section.split("Over the whole training:")[1]
    primary = section.split("The primary comparisons (3 of 3 with runs so far):")[1].split("What each rules out:")[0]
    # controller minus ratio 25 by seed: -0.1, -0.2, -0.15: t = -5.196 on 2 df, p = 0.0351; the pass@8 pairs differ by
    # 0 on every seed (p = 1): Holm over 3 gives 3 x 0.0351 = 0.105
    row = next(line for line in primary.splitlines() if "groups without reward variance" in line)
    assert "| -0.150 | [-0.274, -0.026] | 0.035 |" in row and row.endswith("| 0.105 | not distinguishable |")


def test_a_section_whose_arms_ran_at_two_revisions_says_what_the_check_between_them_found(results, tmp_path):  # noqa: F811
    runs = tmp_path / "runs" / "results"
    for seed in range(2):
        arm_run(runs / "countdown-collapse-base" / f"ratio=25-seed={seed}", ["ratio=25"], seed, RATIO25[seed])
    check = {"what": "ratio=25 seed=0 trained again", "revisions": ["aaaaaaa", "bbbbbbb"], "base_model": [DIGEST, DIGEST],
             "records_compared": 24, "steps": [0, 23], "fields_compared": 2785, "differing_fields": {"reward/answer_found": 23},
             "note": "a metric the newer revision logs and the older does not"}
    (tmp_path / "figures" / "countdown-collapse-controls").mkdir(parents=True)
    (tmp_path / "figures" / "countdown-collapse-controls" / "revision_check.json").write_text(json.dumps(check))
    section = section_of(results.render(tmp_path / "runs"), "Where plain DAPO degrades")
    assert ("Two revisions, checked: ratio=25 seed=0 trained again (aaaaaaa and bbbbbbb, warm-up d1d1d1d1d1d1): 24 records (steps 0-23), "
            "2785 fields compared; fields that differ: reward/answer_found on 23 record(s) (a metric the newer revision logs and the older "
            "does not).") in section


def test_a_partial_family_is_adjusted_over_its_declared_size_and_a_one_seed_arm_is_untested(results, tmp_path):  # noqa: F811
    runs = tmp_path / "runs" / "results"
    for seed in range(3):
        arm_run(runs / "countdown-collapse-base" / f"ratio=0-seed={seed}", ["ratio=0"], seed, RATIO0[seed])
        arm_run(runs / "countdown-collapse-base" / f"ratio=25-seed={seed}", ["ratio=25"], seed, RATIO25[seed])
        warmup_record(tmp_path / "figures", seed, 0.7)
    arm_run(runs / "countdown-collapse-refresh10" / "seed=0", [], 0, RATIO25[0])  # one seed so far; the other controls: none
    section = section_of(results.render(tmp_path / "runs"), "Where plain DAPO degrades")
    title = "The primary comparisons (3 of 9 with runs so far; Holm over all 9, each without runs counted as p = 1):"
    primary = section.split(title)[1].split("What each rules out:")[0]
    # ratio 25 against ratio 0: p = 0.01307 by seed (see above), x 9 = 0.1176, as in the whole family
    assert "| ratio 25 | ratio 0 | held-out pass@8 | 3 | 0.345 | 0.320 | +0.025 | [+0.013, +0.037] | 0.013 | – | – | – | 0.118 | not distinguishable |" in primary
    gains = [line for line in section.splitlines() if line.startswith("| ratio 25, refresh 10 | ratio 25 |") and "| this section |" in line]
    assert gains and "| – | untested: 1 seed so far | this section |" in gains[0] and "nan" not in gains[0]


def test_a_section_without_a_scored_warm_up_says_why_it_has_no_warm_up_row(results, tmp_path):  # noqa: F811
    runs = tmp_path / "runs" / "results"
    for seed in range(2):
        arm_run(runs / "countdown-collapse-base" / f"ratio=0-seed={seed}", ["ratio=0"], seed, RATIO0[seed])
        arm_run(runs / "countdown-collapse-base" / f"ratio=25-seed={seed}", ["ratio=25"], seed, RATIO25[seed])
    ratio_sweep = runs / "countdown-ratio"
    for seed, digest in ((0, DIGEST), (1, "e2e2e2e2e2e2")):  # a sweep whose seeds started from two warm-ups
        arm_run(ratio_sweep / f"ratio=0-seed={seed}", ["ratio=0"], seed, RATIO0[seed])
        manifest = {"status": "completed", "base_model": {"path": "m", "weights_sha256": digest}}
        (ratio_sweep / f"ratio=0-seed={seed}" / "manifest.json").write_text(json.dumps(manifest))
    page = results.render(tmp_path / "runs")
    controls = section_of(page, "Where plain DAPO degrades")
    assert "| warm-up |" not in controls
    assert ("The warm-up model its runs started from (weights d1d1d1d1d1d1) has no scored record in `docs/results/warmup/`, so it "
            "has no warm-up row: `python scripts/results.py --score-only --only countdown-collapse-base countdown-collapse-kl") in controls
    ratio = section_of(page, "Countdown: off-policy ratio")
    assert "| warm-up |" not in ratio
    assert "Its runs started from 2 warm-up models (d1d1d1d1d1d1, e2e2e2e2e2e2), so it has no one warm-up row." in ratio
    # the sweep its spec says is trained again from a kept warm-up points to the section that does it
    assert POINTER in ratio
    assert "again at these settings" not in controls


POINTER = ('Section "Countdown at the default settings (lr 5e-5, 400 steps): ratio 50 beside ratio 0 and 25" trains ratio 0, '
           'ratio 25 and ratio 50 again at these settings, in runs of their own from a warm-up model that is kept and scored: '
           'a second sample of these points, each against the model it started from.')
"""What countdown-ratio's section says of the section that trains its points again."""


def test_a_sweep_trained_again_points_there_beside_its_own_warm_up_row(results, tmp_path):  # noqa: F811
    runs = tmp_path / "runs" / "results" / "countdown-ratio"
    for seed in range(2):
        arm_run(runs / f"ratio=0-seed={seed}", ["ratio=0"], seed, RATIO0[seed])
        arm_run(runs / f"ratio=25-seed={seed}", ["ratio=25"], seed, RATIO25[seed])
        warmup_record(tmp_path / "figures", seed, 0.7)
    ratio = section_of(results.render(tmp_path / "runs"), "Countdown: off-policy ratio")
    assert "| warm-up | 2/2 | 0.350 ± 0.000 [0.350, 0.350] |" in ratio and "no warm-up row" not in ratio
    # ratio 0 against the warm-up it started from: -0.40 and -0.38 by seed
    assert "| ratio=0 | warm-up | held-out pass@8 | 2 | 0.310 | 0.700 | -0.390 |" in ratio
    assert ratio.count(POINTER) == 1


def test_every_sweep_trained_again_points_to_arms_trained_at_one_of_its_points_configs(results):  # noqa: F811
    """A sweep's ``trained_again`` names arms of a declared section, each of whose composed config is that of one of
    the sweep's points (keeping every checkpoint aside, which changes no training), so a setting one sweep leaves at
    its default and the other names (``refresh=10``) counts as the same."""
    from omegaconf import OmegaConf
    from results_spec import KEPT  # the script's folder is on the path once ``results`` is loaded

    from tsctl.config.compose import compose_node
    from tsctl.stages.ablate.plan import expand

    def config(overrides: list[str]) -> dict:
        return OmegaConf.to_container(compose_node([o for o in overrides if o not in KEPT]).node)

    def points(overrides: list[str]) -> list[list[str]]:
        return expand(overrides)[0]

    pointed = 0
    for name, sweep in results.SWEEPS.items():
        if sweep.trained_again is None:
            continue
        own = [config(point) for point in points(sweep.overrides)]
        arms = {arm.label: arm for arm in results.SECTIONS[sweep.trained_again.section].arms}
        for label in sweep.trained_again.arms:
            arm = arms[label]
            again = [config(point) for point in points(results.SWEEPS[arm.sweep].overrides) if not arm.point or arm.point in point]
            assert len(again) == 1 and again[0] in own, (name, label)
            pointed += 1
    # countdown-ratio and countdown-collapse-ratio: ratio 0, 25 and 50; countdown-refresh: T = 5, 10 and 20;
    # countdown-truncation: fixed, uniform, boundary and entropy; countdown-selectors: latest, uniform and bandit
    assert pointed == 16
