"""``scripts/results.py``: the results page written from finished sweeps, with the four claims assessed."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def results(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("results_script", ROOT / "scripts" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "FIGURES", tmp_path / "figures")
    return module


def write_run(folder: Path, settings: dict, overrides: list[str], records: list[dict], accuracy: float) -> None:
    """A completed run folder: its config, Hydra overrides, metrics and final evaluation."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(settings))
    (folder / "manifest.json").write_text(json.dumps({"status": "completed"}))
    (folder / ".hydra").mkdir()
    (folder / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "final_eval.json").write_text(json.dumps({"greedy_accuracy": accuracy, "pass@1": accuracy / 2}))


def fake_point(folder: Path, ratio: int, seed: int, accuracy: float) -> None:
    """A finished run: entropy falls over the steps and along the position, where the drop deepens by 0.001 + 0.0002*seed
    a step; seeded runs clip prefixes 10x more."""
    records = []
    for step in range(1, 21):
        entropy = 0.5 - (0.01 + 0.0005 * seed) * step + ((0.004 + 0.0002 * seed) * step if ratio else 0)
        record = {"step": step, "time/step": 30.0 * (1 + seed), "reward/mean": 0.4, "entropy": entropy, "entropy_by_pos/0-3": entropy + 0.1, "entropy_by_pos/4-7": entropy - 0.1 - 0.002 * seed - (0.001 + 0.0002 * seed) * step}
        if ratio:
            record |= {"clipped_by_source/prefix": 0.01 + 0.001 * seed, "clipped_by_source/suffix": 0.001}
        records.append(record)
    write_run(folder, {"ratio": ratio, "seed": seed}, [f"ratio={ratio}", f"seed={seed}"], records, accuracy)


def test_page_assesses_the_claims_with_numbers(results, tmp_path):
    sweep = tmp_path / "runs" / "results" / "countdown-ratio"
    for seed in range(3):
        fake_point(sweep / f"ratio=0-seed={seed}", 0, seed, 0.40 + 0.01 * seed)
        fake_point(sweep / f"ratio=25-seed={seed}", 25, seed, 0.40 + 0.01 * seed + (0.02, 0.03, 0.025)[seed])
    (sweep / "ratio=0-seed=0" / "manifest.json").write_text(json.dumps({"status": "completed", "git_revision": "90b822ddba39"}))
    for name, digest in (("ratio=0-seed=1", "aaaaaaaaaaaa"), ("ratio=25-seed=1", "aaaaaaaaaaaa"), ("ratio=25-seed=2", "bbbbbbbbbbbb")):
        base = {"path": "m", "weights_sha256": digest}
        (sweep / name / "manifest.json").write_text(json.dumps({"status": "completed", "base_model": base}))
    manifest = json.loads((sweep / "ratio=25-seed=2" / "manifest.json").read_text())
    arithmetic = {"device": "cpu", "cpu_capability": "AVX2", "torch_threads": 1}
    (sweep / "ratio=25-seed=2" / "manifest.json").write_text(json.dumps(manifest | {"arithmetic": arithmetic}))
    page = results.render(tmp_path / "runs")
    assert "Pending: not yet run with records; `python scripts/results.py --only arithmetic-ratio` runs it." in page
    # 20 steps of 30, 60 and 90 s: 10, 20 and 30 min per seed
    assert ("What the 6 finished run(s) ran (manifest.json): code revision (git_revision): 90b822d (1 run(s)), not recorded (5 run(s)); "
            "uncommitted changes (git_dirty): not recorded (6 run(s)); warm-up model (base_model, its weights' sha256): aaaaaaaaaaaa "
            "(2 run(s)), bbbbbbbbbbbb (1 run(s)), not recorded (3 run(s)); arithmetic (arithmetic: device, CPU, torch threads): "
            "cpu AVX2, 1 thread (1 run(s)), not recorded (5 run(s)). Training took 20 min per run (10-30;") in page
    assert ("They differ in their warm-up model: a difference between points may come from that rather than the setting. Not every "
            "run recorded its code revision, uncommitted changes and arithmetic, so those are not known to be shared.") in page
    claims = page.split("## The method's claims")[1].split("\n## ")[0]
    # (i) over training: steps 19-20 minus steps 1-2 is -18 * (0.01 + 0.0005*seed), -0.189 on average;
    # along the position: tokens 4-7 are 0.2 + 0.002*seed + (0.001 + 0.0002*seed)*step below tokens 0-3, on average over
    # seeds 0-2 0.2 + 0.002 + 0.0012 * 1.5 = 0.2038 below in steps 1-2 (already there at the start) and
    # 0.2 + 0.002 + 0.0012 * 19.5 = 0.2254 in steps 19-20; the drop deepens by 0.0012 * 18 = 0.0216
    (over, start, end, deepens) = [line for line in claims.splitlines() if line.startswith("  - ")][:4]
    assert over.startswith("  - over training: entropy in the last 10% of steps minus the first 10%: ") and "difference -0.189 " in over
    assert start.startswith("  - along the position, already in the first 10% of steps: tokens 4-7 (reached only by responses longer "
                            "than 4 tokens) minus tokens 0-3: ") and "difference -0.2038 " in start and "**lower**" in start
    assert end.startswith("  - along the position, last 10% of steps: tokens 4-7") and "difference -0.2254 " in end
    assert deepens.startswith("  - the drop along the position over training (lower: it deepens") and "difference -0.0216 " in deepens
    assert "countdown-ratio, in sum: **supported**: 4 of 4 comparison(s) say lower." in claims
    # (ii) prefix 1.1% vs suffix 0.1% of tokens
    assert "clipped % of prefix minus suffix tokens (11.0x)" in claims
    # (iii) ratio 25 gains 2-3 points on every seed: better by seed
    # by seed: differences 0.02, 0.03, 0.025: mean 0.025, std 0.005, t = 0.025 / (0.005 / sqrt(3)) = 8.660, p = 0.01307 with
    # 2 degrees of freedom; claim (iii)'s comparisons are the table's, Holm over its two (pass@1 gains exactly half of it,
    # same p): 2 * 0.01307, the table's verdict;
    # the 95% interval 0.025 -+ 4.3027 * 0.005 / sqrt(3) = [+0.013, +0.037]
    greedy = next(line for line in claims.splitlines() if "ratio=25 vs ratio=0, greedy_accuracy: 0.435 vs 0.410; difference +0.025" in line)
    assert "[95% CI +0.013, +0.037] (3 seeds), p=0.0131, Holm p=0.0261 (the comparison table's family): **better**; rules out gains > 0.037 or < 0.013, and any loss" in greedy
    # MDE of 3 seeds at std 0.005: noncentrality 5.6535 solves the power equation, 5.6535 * 0.005 / sqrt(3) = 0.0163
    assert greedy.endswith("MDE 0.016 (80% power, paired t over seeds).")
    # (iv) seeded entropy is higher by (0.004 + 0.0002*seed) * 19.5 over the last 2 steps: +0.0819 on average
    assert "ratio=25 minus ratio=0, entropy at the end of training" in claims and "difference +0.0819" in claims
    assert claims.count("**better**") >= 1 and "**lower**" in claims and "**higher**" in claims
    assert claims.count("countdown-ratio, in sum: **supported**") == 4
    assert (tmp_path / "figures" / "countdown-ratio" / "reward_accuracy.png").is_file()
    assert "| ratio=25 | 3/3 |" in page


def test_a_sweep_with_only_its_baseline_finished_shows_it_and_waits_for_the_rest(results, tmp_path):
    sweep = tmp_path / "runs" / "results" / "countdown-ratio"
    for seed in range(2):
        fake_point(sweep / f"ratio=0-seed={seed}", 0, seed, 0.40 + 0.01 * seed)
    page = results.render(tmp_path / "runs")
    claims = page.split("## The method's claims")[1].split("\n## ")[0]
    assert "  - over training: entropy in the last 10% of steps minus the first 10%" in claims  # (i) needs ratio=0 only
    # with seeds 0 and 1 the drop along the position deepens by 0.018 and 0.0216: t = 0.0198 / (0.002546 / sqrt(2)) = 11.0
    # on 1 degree of freedom, p = 1 - 2 * atan(11) / pi = 0.0577, the largest of the claim's four: Holm leaves it so
    assert "difference -0.0198 [95% CI -0.04267, +0.003071] (n=2), p=0.0577, Holm p=0.0577 (the claim's family): **not distinguishable**" in claims
    assert "countdown-ratio, in sum: **partly supported**: 3 of 4 comparison(s) say lower." in claims
    assert claims.count("countdown-ratio, in sum: **pending**: no comparison with an interval yet.") == 3
    assert claims.count("no finished seeded run yet.") == 2 and "no paired comparison yet." in claims
    assert "Finished so far: 2 run(s)" in page and "| ratio=0 | 2/2 |" in page and "Paired against" not in page


def test_a_seeded_point_still_running_is_neither_recorded_nor_shown(results, tmp_path):
    sweep = tmp_path / "runs" / "results" / "countdown-ratio"
    for seed in range(2):
        fake_point(sweep / f"ratio=0-seed={seed}", 0, seed, 0.40 + 0.01 * seed)
    running = sweep / "ratio=25-seed=0"
    fake_point(running, 25, 0, 0.5)
    (running / "manifest.json").write_text(json.dumps({"status": "running"}))
    (running / "final_eval.json").unlink()
    page = results.render(tmp_path / "runs")
    claims = page.split("## The method's claims")[1].split("\n## ")[0]
    assert claims.count("no finished seeded run yet.") == 2 and "too few" not in claims
    assert "| ratio=25 |" not in page and "Finished so far: 2 run(s)" in page
    assert sorted(p.name for p in results.records_of("countdown-ratio").iterdir()) == ["ratio=0-seed=0", "ratio=0-seed=1"]


def fake_selector_point(folder: Path, selector: str, seed: int, accuracy: float) -> None:
    """A finished ``ratio=25 seeds.pool_size=4`` run: ``latest`` seeds from arm 0 only, the others from arms 0 and 1."""
    records = []
    for step in range(1, 11):
        record = {"step": step, "reward/mean": 0.4, "entropy": 0.3}
        arms = {"0": 8} if selector == "latest" or step < 3 else {"0": 2, "1": 6}
        for arm, samples in arms.items():
            record |= {f"seeds/by_arm/{arm}/samples": samples, f"seeds/by_arm/{arm}/accuracy": 0.5, f"seeds/by_arm/{arm}/advantage": 0.1 * int(arm)}
        records.append(record)
    settings = {"ratio": 25, "seed": seed, "seeds": {"pool_size": 4, "selector": selector}}
    write_run(folder, settings, [f"seeds.selector={selector}", f"seed={seed}"], records, accuracy)


def test_the_selector_sweep_is_paired_against_latest_with_its_attribution(results, tmp_path):
    sweep = tmp_path / "runs" / "results" / "countdown-selectors"
    for seed in range(3):
        fake_selector_point(sweep / f"seed={seed}-seeds.selector=latest", "latest", seed, 0.40 + 0.01 * seed)
        fake_selector_point(sweep / f"seed={seed}-seeds.selector=bandit", "bandit", seed, 0.40 + 0.01 * seed + (0.001, -0.002, 0.0015)[seed])
    page = results.render(tmp_path / "runs")
    section = page.split("## Countdown, ratio 25, a pool of 4 behaviour snapshots")[1]
    assert "Paired against seeds.selector=latest:" in section
    # bandit minus latest: +0.1, -0.2, +0.15 points by seed, a spread that straddles 0
    assert "not distinguishable" in section
    attribution = section.split("### Seeded samples by source, arm, age and prefix length")[1]
    # bandit, arm 1: 6 samples on each of steps 3-10 of 8 + 8 + 8 * 8 seeded samples: 48 / 80; advantage 0.1
    assert "| seeds.selector=bandit | selector arm (windows old) | 1 | 0.600 ± 0.000 [0.600, 0.600] | 0.500 ± 0.000 [0.500, 0.500] | 0.100 ± 0.000 [0.100, 0.100] |" in attribution
    assert "| seeds.selector=latest | selector arm (windows old) | 0 | 1.000 ± 0.000 [1.000, 1.000] |" in attribution
    assert (tmp_path / "figures" / "countdown-selectors" / "arm_choices.png").is_file()
    assert "](results/countdown-selectors/arm_choices.png)" in section


def test_a_comparison_on_one_seed_says_it_is_too_few_instead_of_an_interval(results, tmp_path):
    sweep = tmp_path / "runs" / "results" / "countdown-ratio"
    for seed in range(2):
        fake_point(sweep / f"ratio=0-seed={seed}", 0, seed, 0.40 + 0.01 * seed)
    fake_point(sweep / "ratio=25-seed=0", 25, 0, 0.43)
    claims = results.render(tmp_path / "runs").split("## The method's claims")[1].split("\n## ")[0]
    assert "ratio=25 vs ratio=0, greedy_accuracy: 0.430 vs 0.400 (1 finished pair(s), too few for an interval)." in claims
    assert "nan" not in claims


def write_trained_run(folder: Path, overrides: list[str]) -> None:
    """A finished run whose config.yaml is what ``tsctl train`` would save for ``overrides``."""
    from omegaconf import OmegaConf

    from tsctl.runconfig import compose_config

    node = compose_config(overrides).node
    write_run(folder, {}, overrides, [{"step": 1, "entropy": 0.3}], 0.4)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(node))
    (folder / "manifest.json").write_text(json.dumps({"status": "completed", "finished_step": 400}))


def test_the_truncation_sweep_copies_the_ratio_sweep_s_runs_as_its_uniform_point(results, tmp_path):
    runs_dir = tmp_path / "runs"
    ratio = runs_dir / "results" / "countdown-ratio"
    place = ["experiment=results", f"runs_dir={runs_dir}"]
    write_trained_run(ratio / "ratio=25-seed=0", ["task=countdown", "ratio=25", "seed=0", *place])
    write_trained_run(ratio / "ratio=25-seed=1", ["task=countdown", "ratio=25", "seed=1", "trainer.lr=0.5", *place])  # another config
    write_trained_run(ratio / "ratio=25-seed=2", ["task=countdown", "ratio=25", "seed=2", *place])
    (ratio / "ratio=25-seed=2" / "manifest.json").write_text(json.dumps({"status": "running"}))  # not finished

    assert results.share_runs("countdown-truncation", 3, 150, str(runs_dir)) == []  # trainer.steps=150 is another config
    written = results.share_runs("countdown-truncation", 3, None, str(runs_dir))

    target = runs_dir / "results" / "countdown-truncation" / "seed=0-truncation=uniform"
    assert written == [target]
    config = yaml.safe_load((target / "config.yaml").read_text())
    assert (config["experiment"], config["name"], config["truncation"], config["ratio"]) == ("results/countdown-truncation", target.name, "uniform", 25.0)
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["copied_from"] == str(ratio / "ratio=25-seed=0") and manifest["finished_step"] == 400
    assert "truncation=uniform" in yaml.safe_load((target / ".hydra" / "overrides.yaml").read_text())
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # seed 1 differs, seed 2 unfinished
    assert sorted(p.name for p in target.parent.parent.iterdir()) == ["countdown-ratio", "countdown-truncation"]  # no copy left half-way
    (target / "final_eval.json").write_text(json.dumps({"greedy_accuracy": 0.9}))
    assert results.share_runs("countdown-truncation", 3, None, str(runs_dir)) == []  # an existing copy is kept
    assert json.loads((target / "final_eval.json").read_text()) == {"greedy_accuracy": 0.9}
    page = "\n".join(results.section("countdown-truncation", runs_dir)[0])
    assert "The truncation=uniform runs of seeds 0 are the countdown-ratio sweep's ratio=25 runs, copied" in page


def test_the_default_run_trained_in_one_sweep_is_copied_into_the_others_and_the_page_says_from_where(results, tmp_path):
    runs_dir = tmp_path / "runs"
    place = ["experiment=results", f"runs_dir={runs_dir}"]
    refresh = runs_dir / "results" / "countdown-refresh"
    write_trained_run(refresh / "refresh=10-seed=0", ["task=countdown", "ratio=25", "refresh=10", "seed=0", *place])
    write_trained_run(refresh / "refresh=5-seed=0", ["task=countdown", "ratio=25", "refresh=5", "seed=0", *place])
    truncation = runs_dir / "results" / "countdown-truncation"
    write_trained_run(truncation / "seed=1-truncation=uniform", ["task=countdown", "ratio=25", "truncation=uniform", "seed=1", *place])

    ratio = runs_dir / "results" / "countdown-ratio"
    assert results.share_runs("countdown-ratio", 3, None, str(runs_dir)) == [ratio / "ratio=25-seed=0", ratio / "ratio=25-seed=1"]
    assert results.share_runs("countdown-truncation", 3, None, str(runs_dir)) == [truncation / "seed=0-truncation=uniform"]
    assert results.share_runs("countdown-refresh", 3, None, str(runs_dir)) == [refresh / "refresh=10-seed=1"]
    assert not (ratio / "ratio=5-seed=0").exists() and not (truncation / "seed=0-truncation=fixed").exists()  # only the default run
    assert yaml.safe_load((ratio / "ratio=25-seed=1" / ".hydra" / "overrides.yaml").read_text())[:3] == ["task=countdown", "ratio=25", "seed=1"]
    page = "\n".join(results.section("countdown-ratio", runs_dir)[0])
    assert "The ratio=25 runs of seeds 0 are the countdown-refresh sweep's refresh=10 runs, copied" in page
    assert "The ratio=25 runs of seeds 1 are the countdown-truncation sweep's truncation=uniform runs, copied" in page


def test_the_point_folder_is_the_one_tsctl_ablate_writes():
    spec = importlib.util.spec_from_file_location("results_names", ROOT / "scripts" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.point_folder(["ratio=25"], 1) == "ratio=25-seed=1"
    assert module.point_folder(["truncation=uniform"], 2) == "seed=2-truncation=uniform"
    assert module.point_folder(["refresh=10"], 0) == "refresh=10-seed=0"


def test_a_claim_is_summed_up_from_its_comparisons_verdicts():
    from tsctl.analysis.claims import claim_status

    lines = ["better", "not distinguishable", None]  # the verdicts of three comparisons, the last without an interval yet
    assert claim_status(lines, "better") == "**partly supported** so far: 1 of 2 comparison(s) say better; 1 more wait for finished runs"
    assert claim_status(lines[:1], "better") == "**supported**: 1 of 1 comparison(s) say better"
    assert claim_status(lines[1:], "better") == "**not supported** so far: 0 of 1 comparison(s) say better; 1 more wait for finished runs"
    assert claim_status(lines[2:], "better") == "**pending**: no comparison with an interval yet"


def greedy_run(seed: int, solved: list[int]):
    """A finished run whose final evaluation holds only per-problem greedy results."""
    from tsctl.analysis.points import Run

    per_problem = {"greedy": {"ids": [str(i) for i in range(len(solved))], "solved": solved}}
    return Run(Path(f"seed={seed}"), "completed", None, {}, [], {"per_problem": per_problem}, str(seed))


def test_seeds_against_seeds_compares_the_seeds_spread_with_what_problem_sampling_predicts(results):
    from tsctl.analysis.points import Point

    runs = [greedy_run(0, [1, 1, 1, 0]), greedy_run(1, [1, 1, 0, 0]), greedy_run(2, [1, 0, 0, 0])]
    lines = results.seed_spread_check(Point("ratio=0", {}, runs, runs))
    # seed means 0.75, 0.5, 0.25 (std 0.25): MS_seed = 4 * 0.125 / 2 = 0.25; the cells' residuals square to 5/6 over
    # 2 * 3 degrees of freedom: MS_cell = 5/36, whose share of a seed's mean is sqrt(5/36 / 4) = 0.1863; F = 0.25 / (5/36)
    # = 1.8 on (2, 6) degrees of freedom: p = (1 + 2 * 1.8 / 6)^-3 = 0.2441
    assert "| held-out greedy acc. | 3 | 4 | 0.2500 | 0.1863 | 1.80 | 0.244 |" in lines
    assert lines[-2].startswith("On no held-out metric do the seeds of one setting differ by more than problem sampling explains")

    rng = np.random.default_rng(0)
    alike = [greedy_run(seed, list(rng.integers(0, 2, 400))) for seed in range(3)]  # three draws of one coin per problem
    apart = greedy_run(3, [1] * 400)  # solves everything
    lines = results.seed_spread_check(Point("ratio=0", {}, alike + [apart], alike + [apart]))
    assert lines[-2].startswith("On held-out greedy acc. the seeds of one setting differ by more than problem sampling explains")
    assert results.seed_spread_check(Point("ratio=0", {}, alike[:1], alike[:1])) == []  # one seed says nothing


def test_the_page_is_written_again_from_the_records_once_the_runs_are_gone(results, tmp_path):
    import shutil

    runs_dir = tmp_path / "runs"
    for seed in range(3):
        fake_point(runs_dir / "results" / "countdown-ratio" / f"ratio=0-seed={seed}", 0, seed, 0.40 + 0.01 * seed)
        fake_point(runs_dir / "results" / "countdown-ratio" / f"ratio=25-seed={seed}", 25, seed, 0.42 + 0.01 * seed)
    page = results.render(runs_dir)
    shutil.rmtree(runs_dir)
    assert results.render() == page  # records alone
    assert "Finished so far: 6 run(s), each recorded in `docs/results/countdown-ratio/runs/`" in page

    shutil.rmtree(results.records_of("countdown-ratio"))
    assert results.render() == page  # no record: the section and the claims last written are kept
    assert json.loads((tmp_path / "figures" / "countdown-ratio" / "section.json").read_text())["runs"] == 6

    # trained again on another machine: 4 of the 6 runs so far do not replace the section of 6
    for seed in range(2):
        fake_point(runs_dir / "results" / "countdown-ratio" / f"ratio=0-seed={seed}", 0, seed, 0.30)
        fake_point(runs_dir / "results" / "countdown-ratio" / f"ratio=25-seed={seed}", 25, seed, 0.30)
    partial = results.render(runs_dir)
    assert partial.replace("`docs/results/countdown-ratio/runs/` holds 4 record(s) so far: this section is written anew from "
                           "them once they are as many as the 6 run(s) it stands on.\n\n", "") == page
    fake_point(runs_dir / "results" / "countdown-ratio" / "ratio=0-seed=2", 0, 2, 0.30)
    fake_point(runs_dir / "results" / "countdown-ratio" / "ratio=25-seed=2", 25, 2, 0.30)
    caught_up = results.render(runs_dir)
    assert "Finished so far: 6 run(s)" in caught_up and "0.300 vs 0.300" in caught_up and "holds 4 record(s)" not in caught_up

    shutil.rmtree(results.records_of("countdown-ratio"))
    (tmp_path / "figures" / "countdown-ratio" / "section.md").unlink()
    (tmp_path / "figures" / "countdown-ratio" / "section.json").unlink()
    assert "Pending: not yet run with records; `python scripts/results.py --only countdown-ratio` runs it." in results.render()


def test_a_later_sitting_restores_the_records_instead_of_training_them_and_never_overwrites_one(results, tmp_path):
    from tsctl.io.runs import RunDir
    from tsctl.analysis.points import is_done

    first, later = tmp_path / "first", tmp_path / "later"
    fake_point(first / "results" / "countdown-refresh" / "refresh=5-seed=0", 25, 0, 0.41)
    fake_point(first / "results" / "countdown-refresh" / "refresh=5-seed=1", 25, 1, 0.42)
    (first / "results" / "countdown-refresh" / "refresh=5-seed=1" / "final_eval.json").unlink()  # not finished
    assert results.keep_records("countdown-refresh", first) == [results.records_of("countdown-refresh") / "refresh=5-seed=0"]

    (first / "results" / "countdown-refresh" / "refresh=5-seed=0" / "final_eval.json").write_text(json.dumps({"greedy_accuracy": 0.9}))
    assert results.keep_records("countdown-refresh", first) == []  # the record stays as it was
    fake_point(later / "results" / "countdown-refresh" / "refresh=20-seed=0", 25, 0, 0.43)  # this sitting's own run
    restored = results.restore_records("countdown-refresh", later)
    assert restored == [later / "results" / "countdown-refresh" / "refresh=5-seed=0"]
    assert is_done(RunDir(restored[0])) and json.loads((restored[0] / "final_eval.json").read_text())["greedy_accuracy"] == 0.41
    assert results.restore_records("countdown-refresh", later) == []  # an existing folder is left alone


def test_a_run_of_another_length_is_neither_recorded_nor_given_records(results, tmp_path, monkeypatch):
    runs_dir = tmp_path / "runs"
    fake_point(runs_dir / "results" / "countdown-refresh" / "refresh=5-seed=0", 25, 0, 0.41)
    short = runs_dir / "results" / "countdown-refresh" / "refresh=5-seed=1"
    fake_point(short, 25, 1, 0.42)
    (short / "config.yaml").write_text(yaml.safe_dump({"ratio": 25, "seed": 1, "trainer": {"steps": 150}}))
    assert results.keep_records("countdown-refresh", runs_dir) == [results.records_of("countdown-refresh") / "refresh=5-seed=0"]

    monkeypatch.setattr(results.subprocess, "run", lambda *args, **kwargs: None)  # no training here
    monkeypatch.setattr(results, "machine_weights", lambda name, runs_dir: None)
    results.run_sweep("countdown-refresh", 2, 150, 1, str(tmp_path / "short"))
    assert not (tmp_path / "short" / "results" / "countdown-refresh").exists()  # the default-length record is not restored
    results.run_sweep("countdown-refresh", 2, None, 1, str(tmp_path / "default"))
    assert (tmp_path / "default" / "results" / "countdown-refresh" / "refresh=5-seed=0" / "metrics.jsonl").is_file()


def test_a_run_from_before_manifests_named_the_base_model_is_recorded_with_the_cached_model_it_started_from(results, tmp_path):
    import hashlib

    from tsctl.models.builtin import builtin_dir
    from tsctl.runconfig import compose_config

    runs_dir = tmp_path / "runs"
    overrides = ["task=countdown", "ratio=25", "refresh=5", "seed=0", "experiment=results", f"runs_dir={runs_dir}"]
    write_trained_run(runs_dir / "results" / "countdown-refresh" / "refresh=5-seed=0", overrides)
    cached = builtin_dir(compose_config(overrides).cfg)
    cached.mkdir(parents=True)
    (cached / "model.safetensors").write_bytes(b"weights")
    (cached / "warmup.json").write_text("{}")
    results.keep_records("countdown-refresh", runs_dir)
    manifest = json.loads((results.records_of("countdown-refresh") / "refresh=5-seed=0" / "manifest.json").read_text())
    assert manifest["base_model"] == {"path": str(cached), "weights_sha256": hashlib.sha256(b"weights").hexdigest()[:12]}
    assert manifest["finished_step"] == 400  # the rest of the manifest as the run wrote it


def test_an_old_run_is_matched_with_the_model_cache_of_its_own_runs_folder_never_the_working_directory_s(results, tmp_path, monkeypatch):
    from tsctl.models.builtin import builtin_dir
    from tsctl.runconfig import compose_config

    overrides = ["task=countdown", "ratio=25", "refresh=5", "seed=0", "experiment=results"]  # no runs_dir: a run of the default place
    monkeypatch.chdir(tmp_path)  # a user's checkout, whose runs/ holds a warmed-up model of the same settings
    users = builtin_dir(compose_config(overrides).cfg)
    assert not users.is_absolute()
    users.mkdir(parents=True)
    (users / "model.safetensors").write_bytes(b"the user's weights")
    (users / "warmup.json").write_text("{}")
    runs_dir = tmp_path / "elsewhere"
    write_trained_run(runs_dir / "results" / "countdown-refresh" / "refresh=5-seed=0", overrides)
    results.keep_records("countdown-refresh", runs_dir)
    manifest = json.loads((results.records_of("countdown-refresh") / "refresh=5-seed=0" / "manifest.json").read_text())
    assert "base_model" not in manifest  # no model cached under its own runs folder: not known, not the user's


def started_from(run: Path, digest: str) -> None:
    """Name the built-in weights the run folder ``run`` started from in its manifest."""
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(manifest | {"base_model": {"path": "m", "weights_sha256": digest}}))


def test_a_sweep_whose_records_started_from_other_weights_is_not_trained_further_here(results, tmp_path, monkeypatch, capsys):
    first, here = tmp_path / "first", tmp_path / "here"
    fake_point(first / "results" / "countdown-truncation" / "seed=0-truncation=fixed", 25, 0, 0.41)
    started_from(first / "results" / "countdown-truncation" / "seed=0-truncation=fixed", "aaaaaaaaaaaa")
    results.keep_records("countdown-truncation", first)
    commands: list[list[str]] = []
    monkeypatch.setattr(results.subprocess, "run", lambda command, **kwargs: commands.append(command))
    monkeypatch.setattr(results, "machine_weights", lambda name, runs_dir: "bbbbbbbbbbbb")
    results.run_sweep("countdown-truncation", 3, None, 1, str(here))
    assert commands == []  # no tsctl ablate
    out = capsys.readouterr().out
    assert "countdown-truncation: not trained here: its records started from built-in weights aaaaaaaaaaaa, this machine's warm-up gives bbbbbbbbbbbb" in out
    assert "move docs/results/countdown-truncation/runs/ aside first" in out

    monkeypatch.setattr(results, "machine_weights", lambda name, runs_dir: "aaaaaaaaaaaa")  # the same weights: trained on
    results.run_sweep("countdown-truncation", 3, None, 1, str(here))
    assert commands[0][1:4] == ["-m", "tsctl", "ablate"]


def test_only_runs_from_this_machine_s_weights_are_copied_between_sweeps(results, tmp_path):
    runs_dir = tmp_path / "runs"
    place = ["experiment=results", f"runs_dir={runs_dir}"]
    refresh = runs_dir / "results" / "countdown-refresh"
    for seed, digest in ((0, "aaaaaaaaaaaa"), (1, "bbbbbbbbbbbb")):
        write_trained_run(refresh / f"refresh=10-seed={seed}", ["task=countdown", "ratio=25", "refresh=10", f"seed={seed}", *place])
        started_from(refresh / f"refresh=10-seed={seed}", digest)
    write_trained_run(refresh / "refresh=10-seed=2", ["task=countdown", "ratio=25", "refresh=10", "seed=2", *place])  # weights not named
    truncation = runs_dir / "results" / "countdown-truncation"
    copied = results.share_runs("countdown-truncation", 3, None, str(runs_dir), "aaaaaaaaaaaa")
    assert copied == [truncation / "seed=0-truncation=uniform", truncation / "seed=2-truncation=uniform"]


def test_this_machine_s_weights_are_those_of_the_warmed_up_model_of_the_sweep_s_task(results, tmp_path, monkeypatch):
    import hashlib

    from tsctl.models.builtin import builtin_dir
    from tsctl.runconfig import compose_config

    commands: list[list[str]] = []
    monkeypatch.setattr(results.subprocess, "run", lambda command, **kwargs: commands.append(command))
    cached = builtin_dir(compose_config(["task=arithmetic", f"runs_dir={tmp_path}"]).cfg)
    cached.mkdir(parents=True)
    (cached / "model.safetensors").write_bytes(b"arithmetic weights")
    assert results.machine_weights("arithmetic-ratio", str(tmp_path)) == hashlib.sha256(b"arithmetic weights").hexdigest()[:12]
    assert commands == [[results.sys.executable, "-m", "tsctl", "warmup", "task=arithmetic", f"runs_dir={tmp_path}"]]  # the keys the warm-up reads
    # a sweep that also sets keys the warm-up does not read (and that are idle at its first point) asks for the warm-up alone
    results.machine_weights("countdown-collapse-ratio", str(tmp_path))
    assert commands[-1] == [results.sys.executable, "-m", "tsctl", "warmup", "task=countdown", f"runs_dir={tmp_path}"]


def test_a_sweep_trains_whole_seeds_first_so_an_unfinished_one_has_paired_points(results, tmp_path, monkeypatch):
    from tsctl.stages.ablate import expand, is_report_override

    commands: list[list[str]] = []
    monkeypatch.setattr(results.subprocess, "run", lambda command, **kwargs: commands.append(command))
    monkeypatch.setattr(results, "machine_weights", lambda name, runs_dir: None)
    results.run_sweep("arithmetic-ratio", 2, None, 1, str(tmp_path))
    points, _ = expand([o for o in commands[0][4:] if not is_report_override(o)])
    assert [(p["seed"], p["ratio"]) for p in (dict(o.split("=", 1) for o in point) for point in points)] == [
        ("0", "0"), ("0", "25"), ("0", "50"), ("1", "0"), ("1", "25"), ("1", "50")]


def test_check_fails_with_a_line_per_section_its_records_cannot_write(results, tmp_path, capsys):
    import shutil

    runs_dir, page = tmp_path / "runs", tmp_path / "RESULTS.md"
    for seed in range(2):
        fake_point(runs_dir / "results" / "countdown-ratio" / f"ratio=0-seed={seed}", 0, seed, 0.40 + 0.01 * seed)
    results.main(["--render", "--check", "--runs-dir", str(runs_dir), "--page", str(page)])  # the other sweeps are pending
    assert "every section on the page is written from its records" in capsys.readouterr().out
    assert "Pending: not yet run with records; `python scripts/results.py --only countdown-selectors` runs it." in page.read_text()

    shutil.rmtree(results.records_of("countdown-ratio"))  # the kept section of 2 runs is still shown, from no record
    with pytest.raises(SystemExit) as failed:
        results.main(["--check", "--page", str(page)])
    assert failed.value.code == 1
    assert capsys.readouterr().err == ("not from records: countdown-ratio: its section stands on 2 run(s) but "
                                       "docs/results/countdown-ratio/runs/ holds 0 record(s)\n")


def test_every_declared_sweep_that_sweeps_its_baselines_key_gets_a_report_baseline_and_no_other(results):
    """A sweep of one point (seeds aside) has nothing to compare with: ``report.baseline`` would stop its ablate."""
    assert results.swept("ratio=0", ["task=countdown", "ratio=0,25,50"])
    assert not results.swept("ratio=25", ["task=countdown", "ratio=25", "refresh=10"])
    assert not results.swept("refresh=10", ["ratio=0,25", "refresh=10"])
    single = {name for name, sweep in results.SWEEPS.items() if not results.swept(sweep.baseline, sweep.overrides)}
    assert {"countdown-collapse-no-prefix-grad", "countdown-collapse-kl", "countdown-collapse-controller"} <= single
    assert "countdown-collapse-base" not in single
