"""The findings are the records': the results page, with the table of findings that opens it, is what
``scripts/results.py`` writes from the committed records, and README quotes no p-value or verdict of its own."""

import re
import shutil
from pathlib import Path

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


def test_readme_quotes_no_p_value_or_verdict(written):
    readme = (ROOT / "README.md").read_text()
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
