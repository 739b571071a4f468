"""Answer extraction and grading: formats of real answers, wrong answers, pathological model output."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tsctl.tasks.grading import ensure_answer_line, extract_answer, grade, normalize_answer, to_number

PATHOLOGICAL_LIMIT_S = 10.0
"""Upper bound on grading one pathological answer (math-verify timeouts are 1 s per step)."""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("the answer is \\boxed 5$.", "5"),
        ("$\\fbox{12}$", "12"),
        ("$\\framebox{204}$ minutes", "204"),
        ("first \\boxed{3}, then truncated \\boxed{4", "3"),
        ("48/2 = 24\n#### 24", "24"),
        ("work\nAnswer: 17\n", "17"),
        ("Answer: 1\nno wait\nAnswer: 2", "2"),
        ("\\boxed{7}\nAnswer: 8", "7"),
        ("no final answer here", None),
        ("Answer:   ", None),
        ("\\boxed{", None),
        ("\\boxed{}", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_extract_answer_without_marker() -> None:
    assert extract_answer("Answer: 3", marker=None) is None
    assert extract_answer("Final: 3", marker="Final:") == "3"


def test_ensure_answer_line() -> None:
    assert ensure_answer_line("2 + 2 = 4", "4", "Answer:") == "2 + 2 = 4\nAnswer: 4"
    assert ensure_answer_line("so \\boxed{4}", "4", "Answer:") == "so \\boxed{4}"
    assert ensure_answer_line("x\nAnswer: 4", "4", "Answer:") == "x\nAnswer: 4"
    assert ensure_answer_line(None, "4", "Answer:") is None


@pytest.mark.parametrize(
    ("predicted", "gold"),
    [
        ("\\frac{3}{4}", "0.75"),
        ("3/4", "\\frac34"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("2\\sqrt{2}", "\\sqrt{8}"),
        ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"),
        ("[2,5)", "[2, 5)"),
        ("(-\\infty, 0) \\cup \\{1\\}", "(-\\infty, 0) \\cup\\{1\\}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"),
        ("\\{1, 2\\}", "\\{2, 1\\}"),
        ("30^\\circ", "30"),
        ("30", "30^{\\circ}"),
        ("\\text{Evelyn}", "Evelyn"),
        ("evelyn", "\\text{Evelyn}"),
        ("\\text{(C)}", "C"),
        ("27.0", "27"),
        ("27", "27.0"),
        ("1,000", "1000"),
        ("\\$32,348", "\\$32,\\!348"),
        ("x = 5", "5"),
        ("10\\%", "10"),
        ("\\textbf{(073)}", "073"),
        ("84, 69", "69, 84"),
        ("$\\frac{1}{2 n+2}$", "\\frac{1}{2n+2}"),
    ],
)
def test_math_verify_accepts_equivalent_forms(predicted: str, gold: str) -> None:
    assert grade(predicted, gold, "math_verify") == 1.0


@pytest.mark.parametrize(
    ("predicted", "gold"),
    [
        ("3", "4"),
        ("(2,1)", "(1,2)"),
        ("[1,3]", "(1,3)"),
        ("\\sqrt{2}", "2"),
        ("\\frac{1}{3}", "0.34"),
        ("Eve", "\\text{Evelyn}"),
        ("", "0"),
    ],
)
def test_math_verify_rejects_different_answers(predicted: str, gold: str) -> None:
    assert grade(predicted, gold, "math_verify") == 0.0


@pytest.mark.parametrize(
    ("predicted", "gold", "expected"),
    [
        ("1,000", "1000", 1.0),
        ("3/4", "0.75", 1.0),
        ("\\frac{3}{4}", "0.75", 1.0),
        ("-3/4", "-0.75", 1.0),
        ("27.0", "27", 1.0),
        ("$18", "18", 1.0),
        ("0.33333", "1/3", 0.0),
        ("0.3333333", "1/3", 1.0),
        ("19", "18", 0.0),
        ("eighteen", "18", 0.0),
        ("1/0", "1", 0.0),
    ],
)
def test_numeric(predicted: str, gold: str, expected: float) -> None:
    assert grade(predicted, gold, "numeric") == expected


def test_numeric_tolerance_is_configurable() -> None:
    assert grade("3.14", "3.14159", "numeric", rel_tol=1e-3) == 1.0
    assert grade("3.14", "3.14159", "numeric") == 0.0


def test_exact_compares_normalised_strings() -> None:
    assert grade(" \\text{Evelyn}. ", "Evelyn", "exact") == 1.0
    assert grade("\\left(1,2\\right)", "(1, 2)", "exact") == 1.0
    assert grade("0.5", "\\frac{1}{2}", "exact") == 0.0


def test_normalize_answer_and_to_number() -> None:
    assert normalize_answer("$1{,}234.0$.") == "1234"
    assert normalize_answer("\\mathrm{ Hello }") == "hello"
    assert to_number("1,234") == 1234.0
    assert to_number("(1,2)") is None


def test_no_prediction_scores_zero_and_unknown_mode_raises() -> None:
    assert grade(None, "1") == 0.0
    with pytest.raises(ValueError, match="unknown grader"):
        grade("1", "1", "fuzzy")


PATHOLOGICAL = [
    "\\boxed{",
    "(" * 10_000 + "1" + ")" * 10_000,
    "{" * 5_000,
    "9^9^9^9",
    "9^{9^{9^9}}",
    "2^{10^{10}}",
    "(10^{100})!",
    "\\frac{" * 200 + "1" + "}{2}" * 200,
    "x" * 100_000,
    "\\sqrt{\\sqrt{\\sqrt{}}}}}}",
    "\x00\ud800",
]


@pytest.mark.parametrize("mode", ["math_verify", "numeric", "exact"])
def test_pathological_answers_score_zero_in_bounded_time(mode: str) -> None:
    for answer in PATHOLOGICAL:
        start = time.monotonic()
        assert grade(answer, "5", mode) == 0.0
        assert grade(extract_answer(f"\\boxed{{{answer}}}"), "5", mode) == 0.0
        assert time.monotonic() - start < 2 * PATHOLOGICAL_LIMIT_S, answer[:40]


@pytest.mark.parametrize(
    "response",
    [
        "\\boxed{" * 20_000,
        "\\boxed " * 20_000,
        "\\text{" * 20_000,
        "1" * 200_000 + "x",
        "#### " + "9" * 200_000,
        "x" * 10**6,
    ],
)
def test_extraction_of_huge_responses_is_fast(response: str) -> None:
    start = time.monotonic()
    for mode in ("math_verify", "numeric", "exact"):
        assert grade(extract_answer(response), "5", mode) == 0.0
    assert time.monotonic() - start < 2.0


def test_grading_off_the_main_thread() -> None:
    """math-verify's signal timeouts need the main thread; other threads use a worker process."""
    cases = [("\\frac12", "0.5", 1.0), ("2\\sqrt{2}", "\\sqrt{8}", 1.0), ("2^{10^{10}}", "5", 0.0), ("3", "4", 0.0)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        start = time.monotonic()
        results = list(pool.map(lambda case: grade(case[0], case[1]), cases))
        elapsed = time.monotonic() - start
    assert results == [expected for _, _, expected in cases]
    assert elapsed < 30.0
