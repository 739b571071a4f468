"""``scripts/results_regime.py``: the hard regime's candidates are matched to their warm-up records by what the records'
configs hold, and the declared rule picks one only once every candidate is scored."""

import gzip
import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import results_regime as regime  # noqa: E402  (the scripts' folder)
from results_spec import HARD_CANDIDATES, HARD_REGIME, HARD_SCORING  # noqa: E402


def countdown_config(overrides: list[str], warmup_seed: int) -> dict:
    """A record's config.yaml: the task block the candidate's overrides set, and the warm-up seed."""
    config = {"task": {"name": "countdown", "countdown": {"min_numbers": 3, "max_numbers": 4, "max_number": 10, "max_target": 100}},
              "model": {"warmup": {"seed": warmup_seed}}}
    for override in overrides[1:]:
        key, value = override.split("=")
        config["task"]["countdown"][key.rsplit(".", 1)[1]] = int(value)
    return config


def write_record(figures: Path, digest: str, seed: int, config: dict, pass1: float, pass8: float) -> None:
    """A warm-up record of sampling seed ``seed`` with the given scores."""
    folder = figures / "warmup" / f"countdown-{digest}" / f"seed={seed}"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "manifest.json").write_text(json.dumps({"status": "completed"}))
    (folder / "metrics.jsonl.gz").write_bytes(gzip.compress(b""))
    (folder / "final_eval.json").write_text(json.dumps({"pass@1": pass1, "pass@8": pass8, "greedy_accuracy": pass1 / 2}))


def score_all(figures: Path, scores: list[tuple[float, float]]) -> None:
    """Records of every candidate (its (pass@1, pass@8) per sampling seed, the second seed 0.02 lower on pass@8)."""
    for i, (regime_, (pass1, pass8)) in enumerate(zip(HARD_CANDIDATES, scores)):
        for seed in HARD_SCORING["sampling_seeds"]:
            write_record(figures, f"{i:012x}", seed, countdown_config(regime_.overrides, 0), pass1, pass8 - 0.02 * seed)


def test_a_record_belongs_to_the_candidate_whose_settings_its_config_holds(tmp_path):
    first = HARD_CANDIDATES[0]
    write_record(tmp_path, "a" * 12, 0, countdown_config(first.overrides, 0), 0.1, 0.3)
    write_record(tmp_path, "a" * 12, 1, countdown_config(first.overrides, 0), 0.1, 0.2)
    write_record(tmp_path, "b" * 12, 0, countdown_config(first.overrides, 7), 0.9, 0.9)  # a warm-up seed not declared
    write_record(tmp_path, "c" * 12, 0, countdown_config(["task=countdown"], 0), 0.9, 0.9)  # the default task
    found = regime.scored(first, tmp_path)
    assert (found.records, found.warmups) == (2, [0])
    assert found.means == pytest.approx({"pass@1": 0.1, "pass@8": 0.25, "greedy_accuracy": 0.05})
    assert regime.scored(HARD_CANDIDATES[1], tmp_path).records == 0


def test_the_rule_picks_the_highest_pass_at_8_at_most_the_bar_with_some_pass_at_1(tmp_path):
    # pass@8 means 0.39 (too easy), 0.29 (admitted), 0.25 (admitted), 0.19 with pass@1 0 (no pass@1)
    score_all(tmp_path, [(0.2, 0.40), (0.06, 0.30), (0.05, 0.26), (0.0, 0.20)])
    candidates = [regime.scored(r, tmp_path) for r in HARD_CANDIDATES]
    assert [round(c.means["pass@8"], 3) for c in candidates] == [0.39, 0.29, 0.25, 0.19]
    assert regime.chosen(candidates) is candidates[1]
    rows = [line for line in regime.regime_lines(tmp_path) if "`task.countdown." in line]
    assert [row.rsplit("|", 2)[1].strip() for row in rows] == ["too easy", "chosen", "admitted", "no pass@1"]
    assert f"The rule picks **{HARD_CANDIDATES[1].label}**." in regime.regime_lines(tmp_path)


def test_no_choice_while_a_candidate_is_unscored_and_none_when_none_qualifies(tmp_path):
    first = HARD_CANDIDATES[0]
    write_record(tmp_path, "a" * 12, 0, countdown_config(first.overrides, 0), 0.1, 0.2)
    assert regime.chosen([regime.scored(r, tmp_path) for r in HARD_CANDIDATES]) is None
    lines = regime.regime_lines(tmp_path)
    assert any(line.startswith(f"| {first.label} |") and line.endswith("| incomplete |") for line in lines)
    assert f"No choice until every candidate has its {regime.EXPECTED} records." in lines
    other = tmp_path / "all"
    score_all(other, [(0.3, 0.9)] * len(HARD_CANDIDATES))
    assert regime.chosen([regime.scored(r, other) for r in HARD_CANDIDATES]) is None
    assert "No candidate qualifies: more candidates are declared next, the bar stays." in regime.regime_lines(other)


def test_the_committed_records_choose_the_declared_regime():
    candidates = [regime.scored(r, ROOT / "docs" / "results") for r in HARD_CANDIDATES]
    assert all(c.records == regime.EXPECTED for c in candidates)
    pick = regime.chosen(candidates)
    assert pick is not None and pick.means["pass@8"] <= 0.30 and pick.means["pass@1"] > 0
    assert pick.regime.overrides == HARD_REGIME
