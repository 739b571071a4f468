"""How comparisons are put into words: verdicts from Holm-adjusted p, what an interval rules out, equivalence only
against a stated margin, and no page, README or docs line that states a null as an equivalence."""

import math
from pathlib import Path

import pytest

from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config
from tsctl.analysis.report import report
from tsctl.analysis.compare import compare, summarize
from tsctl.analysis.points import find_runs, group_points
from forbidden_phrasings import forbidden_phrasings
from tsctl.analysis.wording import decide, rules_out

ROOT = Path(__file__).resolve().parents[1]


def test_the_verdict_follows_the_adjusted_p_and_the_sign():
    assert decide(0.02, 0.049, 0.05, True) == "better"
    assert decide(0.02, 0.05, 0.05, True) == "not distinguishable"  # not below alpha
    assert decide(-0.02, 0.01, 0.05, True) == "worse"
    assert decide(-0.02, 0.01, 0.05, False) == "better"
    assert decide(0.003, 0.001, 0.05, None) == "higher" and decide(-0.003, 0.001, 0.05, None) == "lower"
    assert decide(0.02, math.nan, 0.05, True) == "untested (no p-value)"  # no p-value: one paired run


def test_equivalence_is_said_only_when_its_test_passes_against_a_stated_margin():
    assert decide(0.001, 0.8, 0.05, True, equivalence_p=0.01, margin=0.02) == "equivalent within ±0.02"
    assert decide(0.001, 0.8, 0.05, True, equivalence_p=0.2, margin=0.02) == "not distinguishable"
    assert decide(0.001, 0.8, 0.05, True) == "not distinguishable"  # no margin: never equivalent
    assert decide(0.03, 0.01, 0.05, True, equivalence_p=0.01, margin=0.05) == "better"  # a difference outranks


def test_an_interval_says_what_it_rules_out_in_the_metric_s_units():
    # the countdown pass@1 at ratio 25: [-0.014, +0.049]
    assert rules_out(-0.014, 0.049, True) == "rules out gains > 0.049 / losses > 0.014"
    assert rules_out(0.004, 0.051, True) == "rules out gains > 0.051 or < 0.004, and any loss"
    assert rules_out(-0.051, -0.004, True) == "rules out losses > 0.051 or < 0.004, and any gain"
    assert rules_out(-0.02, 0.01, False) == "rules out losses > 0.010 / gains > 0.020"  # lower is better
    assert rules_out(-0.00164, 0.00745, None, ".3g") == "rules out rises > 0.00745 / falls > 0.00164"
    assert rules_out(math.nan, math.nan, True) == "rules out nothing (too few runs for an interval)"


def test_the_forbidden_phrasings_are_found_and_a_tested_equivalence_is_not():
    text = ("Seeds neither help nor hurt; ratio has no effect; every paired difference within the seed and problem spread; "
            "the two are equivalent. Refresh makes no difference. They are equivalent within ±0.02 (TOST).")
    assert forbidden_phrasings(text) == ["no effect", "no difference", "neither help nor hurt",
                                         "within the seed and problem spread", "equivalent"]
    assert forbidden_phrasings("not distinguishable; rules out gains > 0.049 / losses > 0.014") == []


@pytest.mark.parametrize("name", ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))])
def test_the_readme_and_the_docs_state_no_null_as_an_equivalence(name):
    assert forbidden_phrasings((ROOT / name).read_text()) == []


def test_a_report_calls_held_out_metrics_equivalent_only_within_the_margin_it_was_given(tmp_path):
    from test_report import paired_run

    for seed in (1, 2, 3):  # ratio 25 gains 10, 12, 14 of 100 problems greedily; its sampled results equal ratio 0's
        base = [1] * 40 + [0] * 60
        paired_run(tmp_path / "s" / f"ratio=0-seed={seed}", {"ratio": 0}, seed, base, [2] * 100)
        paired_run(tmp_path / "s" / f"ratio=25-seed={seed}", {"ratio": 25}, seed, [1] * (38 + 2 * seed + 10) + [0] * (62 - 2 * seed - 10), [2] * 100)
    summary = summarize(group_points(find_runs(tmp_path / "s")))
    plain = {r.metric: r for r in compare(summary, {"ratio": "0"})}
    assert {r.verdict for r in plain.values()} == {"better", "not distinguishable"} and plain["pass@1"].p_equivalence is None
    rows = {r.metric: r for r in compare(summary, {"ratio": "0"}, margin=0.02)}
    assert rows["pass@1"].verdict == "equivalent within ±0.02" and (rows["pass@1"].p_equivalence, rows["pass@1"].p_equivalence_holm) == (0.0, 0.0)  # identical
    assert rows["entropy/plain"].verdict == "not distinguishable" and rows["entropy/plain"].margin is None  # not a held-out metric
    # greedy: differences 0.10, 0.12, 0.14 are better than 0, and far outside ±0.02
    assert rows["greedy_accuracy"].verdict == "better"
    md = (report(tmp_path / "s", echo=False, equivalence_margin=0.02) / "summary.md").read_text()
    assert "| held-out pass@1 | 3 | 0.500 | 0.500 |" in md and "| equivalent within ±0.02 |" in md
    assert "Held-out metrics are also tested for equivalence within ±0.02 (TOST over seeds, Holm-adjusted the same way)" in md


def test_the_equivalence_margin_is_a_fraction_of_problems():
    assert compose_config(["report.equivalence_margin=0.02"]).cfg.report.equivalence_margin == 0.02
    assert compose_config([]).cfg.report.equivalence_margin is None
    with pytest.raises(ConfigError, match="report.equivalence_margin"):
        compose_config(["report.equivalence_margin=2"])
