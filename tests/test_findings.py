"""The findings are the records': the results page, with the box of what we know and the table of findings that open it,
is what ``scripts/results.py`` writes from the committed records; README carries the page's box as it is and quotes no
p-value or verdict of its own; every number of the findings in words is one the page prints."""

import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

from scipy import stats

import pytest

from test_results_page import results  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The page, written from a copy of the committed records (the checkout is left alone)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("results_for_readme", ROOT / "scripts" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    figures = tmp_path_factory.mktemp("results") / "results"
    shutil.copytree(ROOT / "docs" / "results", figures)
    module.FIGURES = figures
    return module, module.render(None)


def test_the_results_page_is_what_its_records_write(written):
    _, page = written
    assert page == (ROOT / "docs" / "RESULTS.md").read_text(), "docs/RESULTS.md differs from its records: run `python scripts/results.py --render`"


def test_the_page_opens_with_the_table_of_findings_and_the_findings_in_words(written):
    module, page = written
    opening = page.split("\n## Findings\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in opening.splitlines() if line.startswith("| ")]
    for q in module.FINDINGS:
        assert sum(row.startswith(f"| {q.question} | {q.regime} | {q.setting} vs {q.baseline}, {module.header(q.metric)}") for row in rows) == 1, q
    assert (ROOT / "docs" / "results" / module.WORDS).read_text().strip() in opening


def box_of(text: str) -> str:
    """The box of what we know in ``text`` (a page or README): its first line and every ``>`` line after it."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("> **What we know**")), None)
    assert start is not None, "no box of what we know"
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(">")), len(lines))
    return "\n".join(lines[start:end])


def test_readme_carries_the_page_s_box_and_links_the_page(written):
    _, page = written
    readme = (ROOT / "README.md").read_text()
    box = box_of(page)
    assert page.startswith("# Results\n\n" + box + "\n\n"), "the box opens the page"
    assert box_of(readme) == box, "README.md's box differs from docs/RESULTS.md's: copy the page's box into README.md"
    lines = [line for line in box.splitlines() if line.startswith("> - ")]
    assert 3 <= len(lines) <= 5 and all("`docs/results/" in line for line in lines), "3-5 lines, each naming its records"
    collapse = next(line for line in lines if line.startswith("> - Where plain DAPO degrades"))
    assert "+0.085 [+0.067, +0.104]" in collapse and "did not replicate" in collapse and "-0.023 [-0.074, +0.027]" in collapse
    assert "Welch t 5.10 on 6.7 df, p 0.0016" in collapse and "`docs/results/countdown-collapse-ratio/runs/`" in collapse
    assert "(docs/RESULTS.md)" in readme and len(readme.splitlines()) <= 160


def test_the_first_collapse_sweep_and_claim_iii_say_its_gain_did_not_replicate(written):
    _, page = written
    section = page.split("\n## Countdown where plain DAPO degrades (lr 2e-4, 200 steps)", 1)[1].split("\n## ", 1)[0]
    assert "+0.085 [+0.067, +0.104] here (better), gave -0.023 [-0.074, +0.027] (not distinguishable): did not replicate" in section
    assert ("| (iii) Every ratio > 0 beats ratio 0 on held-out accuracy and pass@k | **not supported**: 0 of 10 comparison(s) say better "
            "| **not supported**: 0 of 10 comparison(s) say better | **not supported**: 0 of 10 comparison(s) say better and said so "
            "again from a newly warmed-up model (8 said better from this sweep's warm-up model alone) |") in page
    assert "8 of 10 comparison(s) say better |" not in page
    # the default-settings finding in its family of one and over all the primaries, the records' 24 together
    assert "| +0.024 [+0.003, +0.045] | 0.0294 (primary, Holm over 1; 0.559 over all 24 primaries) | better |" in page


def test_every_number_of_the_findings_in_words_is_printed_elsewhere_on_the_page(written):
    module, page = written
    words = (ROOT / "docs" / "results" / module.WORDS).read_text().strip()
    rest = page.replace(words, "")
    numbers = re.findall(r"(?<![\w.])[+-]?\d+\.\d+", words)
    missing = [n for n in numbers if not re.search(r"(?<![\d.])" + re.escape(n) + r"(?!\d)", rest)]
    assert len(numbers) > 100 and missing == [], f"the findings in words quote numbers the page does not print: {missing}"


def test_readme_quotes_no_p_value_or_verdict_outside_the_page_s_box(written):
    readme = (ROOT / "README.md").read_text().replace(box_of((ROOT / "README.md").read_text()), "")
    quoted = re.findall(r"Holm p|\bp ?[=<] ?0\.\d|\*\*(?:better|worse|higher|lower)\*\*|\| (?:better|worse) \|", readme)
    assert quoted == [], f"README quotes {quoted}: the table of findings is docs/RESULTS.md's"


def test_a_comparison_of_one_seed_so_far_is_quoted_untested_without_a_p_value(results):  # noqa: F811
    q = results.FINDINGS[0]
    one = {"setting": q.setting, "baseline": q.baseline, "metric": q.metric, "seeds": 1, "setting_mean": 0.5, "baseline_mean": 0.4,
           "difference": 0.1, "low": float("nan"), "high": float("nan"), "p_holm": float("nan"), "verdict": "untested (no p-value)",
           "family": "primary, Holm over 9", "rules_out": "rules out nothing (too few runs for an interval)"}
    row = next(line for line in results.findings({q.section: [one]}, []) if line.startswith(f"| {q.question} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].endswith(": 0.500 vs 0.400 (1 seed)") and cells[3] == "+0.100 (no interval)"
    assert cells[4:6] == ["– (primary, Holm over 9)", "untested: 1 seed so far"] and "nan" not in row


def test_a_comparison_with_a_warm_up_that_has_no_record_says_so_and_a_section_without_records_is_pending(results):  # noqa: F811
    against_warmup = next(q for q in results.FINDINGS if q.baseline == "warm-up")
    other = {"setting": "x", "baseline": "y", "metric": "pass@8"}  # a row of the section: it has records
    block = results.findings({against_warmup.section: [other]}, [])
    row = next(line for line in block if line.startswith(f"| {against_warmup.question} | {against_warmup.regime} | {against_warmup.setting} vs warm-up"))
    assert "| no warm-up row (its section says why) | – | – | – |" in row
    empty = results.findings({}, [])
    row = next(line for line in empty if line.startswith(f"| {against_warmup.question} | {against_warmup.regime} | {against_warmup.setting} vs warm-up"))
    assert "| pending: no records yet | – | – | – |" in row


def quoted(setting: str, baseline: str, metric: str, difference: float, se: float, df: float, verdict: str) -> dict:
    """A comparison as the page quotes it, with a 95% t-interval at its standard error and degrees of freedom."""
    half = stats.t.ppf(0.975, df) * se
    return {"setting": setting, "baseline": baseline, "metric": metric, "seeds": 5, "setting_mean": 0.5 + difference,
            "baseline_mean": 0.5, "difference": difference, "low": difference - half, "high": difference + half, "se": se, "df": df,
            "p_holm": 0.01, "verdict": verdict, "family": "primary, Holm over 1", "rules_out": "", "warmup": ["aaaaaaaaaaaa"]}


def test_two_estimates_from_two_warm_up_models_are_set_against_each_other_and_pooled_only_when_compatible(results):  # noqa: F811
    import results_known

    # +0.10 and 0.00, each with standard error 0.02 on 4 df: t = 0.1 / sqrt(2 * 0.02^2) = 3.536 on
    # (2 * 0.0004)^2 / (2 * 0.0004^2 / 4) = 8 df, p = 0.0077; pooled, equal weights: 0.05 with standard error
    # sqrt(0.0004 / 2) = 0.01414 on 0.0002^2 / (2 * 0.0001^2 / 4) = 8 df, 0.05 -+ 2.306 * 0.01414 = [0.0174, 0.0826]
    first, again = quoted("ratio=25", "ratio=0", "pass@8", 0.10, 0.02, 4, "better"), quoted("ratio 25", "ratio 0", "pass@8", 0.0, 0.02, 4, "not distinguishable")
    t, df, p = results_known.welch(first, again)
    assert (round(t, 3), round(df, 6), round(p, 4)) == (3.536, 8.0, round(2 * stats.t.sf(0.1 / math.sqrt(0.0008), 8), 4)) and p < 0.05
    pool = results_known.pooled(first, again)
    assert math.isclose(pool.mean, 0.05) and math.isclose(pool.std, math.sqrt(0.0002))
    assert math.isclose(pool.high - pool.mean, stats.t.ppf(0.975, 8) * math.sqrt(0.0002))
    rerun = results_known.RERUNS[2]  # countdown-collapse-ratio's ratio=25 made again in countdown-collapse-controls
    twice = results_known.made_twice({rerun.sweep: [first], rerun.section: [again]})
    assert [(tw.outcome, tw.pooled) for tw in twice] == [("did not replicate; the two estimates are incompatible", None)]
    near = quoted("ratio 25", "ratio 0", "pass@8", 0.08, 0.02, 4, "better")
    (close,) = results_known.made_twice({rerun.sweep: [first], rerun.section: [near]})
    assert close.outcome == "said again" and close.pooled is not None and math.isclose(close.pooled.mean, 0.09)


def test_claim_iii_counts_as_better_only_what_its_rerun_said_again(results):  # noqa: F811
    import results_known

    claims = [{"status": f"status {i}", "lines": [f"line {i}"]} for i in range(4)]
    first = [quoted(f"ratio={r}", "ratio=0", m, 0.05, 0.01, 4, "better") for r in (25, 50) for m in ("pass@1", "pass@8")]
    said_again = [quoted("ratio 25", "ratio 0", m, 0.04, 0.01, 4, "better") for m in ("pass@1", "pass@8")]
    not_again = [quoted("ratio 25", "ratio 0", "pass@1", 0.04, 0.01, 4, "better"), quoted("ratio 25", "ratio 0", "pass@8", 0.0, 0.01, 4, "not distinguishable")]
    blocks = [("countdown-collapse-ratio", claims)]
    unchanged = results_known.surviving(blocks, {"countdown-collapse-ratio": first, "countdown-collapse-controls": said_again})
    assert unchanged == blocks  # ratio 50 has no rerun here: its verdicts stand; ratio 25's were said again
    (_, found), = results_known.surviving(blocks, {"countdown-collapse-ratio": first, "countdown-collapse-controls": not_again})
    assert found[2]["status"] == ("**partly supported**: 3 of 4 comparison(s) say better and said so again from a newly warmed-up "
                                  "model (2 said better from this sweep's warm-up model alone)")
    assert found[2]["lines"][-1].endswith(": 1 of the 2 comparison(s) that say better here said so again; the verdict above counts only those.")
    assert [found[i] for i in (0, 1, 3)] == [claims[i] for i in (0, 1, 3)]


def test_the_primaries_of_every_section_are_one_holm_family_across_the_page(results):  # noqa: F811
    import results_known

    def row(label: str, p: float) -> SimpleNamespace:
        return SimpleNamespace(decided=SimpleNamespace(p_value=p), point=SimpleNamespace(label=label), baseline=SimpleNamespace(label="b"), metric="pass@8")

    decided = results_known.Decided()
    for i, (home, label, p) in enumerate([("s1", "a", 0.01), ("s1", "c", 0.03), ("s2", "a", 0.02), ("s2", "d", math.nan)]):
        decided.rows[(("x", str(i)), ("y", ""), "pass@8")] = (row(label, p), home)
    # Holm over the three with a p-value: 3 * 0.01 = 0.03, then max(0.03, 2 * 0.02) = 0.04, then max(0.04, 0.03) = 0.04
    assert results_known.page_holm(decided) == {("s1", "a", "b", "pass@8"): 0.03, ("s2", "a", "b", "pass@8"): 0.04, ("s1", "c", "b", "pass@8"): 0.04}


def test_a_line_of_the_box_whose_comparisons_the_page_does_not_make_yet_is_pending(results):  # noqa: F811
    import results_known

    lines = results_known.box({}, [], {})
    assert lines[0] == results_known.BOX_HEAD and len(lines) == 2 + len(results_known.KNOWN) + 1
    assert lines[2] == "> - Seeds at the default settings: pending, the page does not make ratio 25 vs ratio 0, held-out pass@8 (`countdown-default`) yet."
