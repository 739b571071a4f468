"""The built-in synthetic tasks: countdown and arithmetic chains."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest
from omegaconf import OmegaConf

from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config
from tsctl.tasks.arithmetic import MAX_DIGITS, ArithmeticSettings, ArithmeticTask, format_question as arithmetic_question, worked_solution
from tsctl.tasks.base import Problem
from tsctl.tasks.countdown import (
    MAX_NUMBERS,
    CountdownSettings,
    CountdownTask,
    check_solution,
    format_question as countdown_question,
    parse_question,
    sample_solutions,
)

SMALL_COUNTDOWN = CountdownSettings(min_numbers=3, max_numbers=3, max_number=6, max_target=30)
"""About 2,300 distinct questions: splits of 300 + 1,500 collide often, exercising the rejection."""

MALFORMED = [
    "",
    " ",
    "\n\n\n",
    "Answer:",
    "Answer: ",
    "garbage ☃ ٢٤ 𝟚𝟜 \x00 \ud800",
    "Answer: ٢٤",
    "5*3=15\n15+7=22\n22+2=24\nAnswer: 24" * 20_000,
    "Answer: " + "9" * 100_000,
    "9" * 100_000 + "+1=" + "9" * 100_000 + "\nAnswer: 24",
    "=\n+\n*\n-\nAnswer: \n",
    "Answer: 24" + "\n" * 50_000 + "x",
]


def make(family: str, train: int, heldout: int, seed: int, cfg=None):
    if family == "countdown":
        return CountdownTask(cfg or CountdownSettings(), train, heldout, seed)
    return ArithmeticTask(cfg or ArithmeticSettings(), train, heldout, seed)


@pytest.fixture(scope="module", params=["countdown", "arithmetic"])
def task(request):
    return make(request.param, 3000, 1000, 7)


# ----------------------------------------------------------------------------------------- both


def test_attributes(task):
    assert task.name in ("countdown", "arithmetic")
    assert task.answer_marker == "Answer:"
    train, heldout = task.problems("train"), task.problems("heldout")
    assert len(train) == 3000 and len(heldout) == 1000
    assert train[0].id == f"{task.name}-train-0" and heldout[999].id == f"{task.name}-heldout-999"
    assert task.problems("train") is train
    with pytest.raises(ValueError, match="unknown split"):
        task.problems("test")


def test_deterministic_and_seed_dependent(task):
    again = make(task.name, 3000, 1000, 7)
    assert list(again.problems("heldout")) == list(task.problems("heldout"))
    assert list(again.problems("train")) == list(task.problems("train"))
    other = make(task.name, 3000, 1000, 8)
    shared = {p.question for p in other.problems("heldout")} & {p.question for p in task.problems("heldout")}
    assert len(shared) < 200  # different seeds, mostly different problems (small families overlap by chance)


def test_omegaconf_config_gives_the_same_problems(task):
    cfg = OmegaConf.structured(CountdownSettings() if task.name == "countdown" else ArithmeticSettings())
    assert list(make(task.name, 10, 1000, 7, cfg).problems("heldout")) == list(task.problems("heldout"))


def test_prefix_stable(task):
    smaller = make(task.name, 500, 1000, 7)
    assert list(smaller.problems("train")) == list(task.problems("train"))[:500]
    assert list(make(task.name, 10, 200, 7).problems("heldout")) == list(task.problems("heldout"))[:200]


def test_splits_distinct_and_disjoint(task):
    train = [p.question for p in task.problems("train")]
    heldout = [p.question for p in task.problems("heldout")]
    assert len(set(train)) == len(train) and len(set(heldout)) == len(heldout)
    assert not set(train) & set(heldout)


@pytest.mark.parametrize("seed", range(4))
def test_disjoint_when_questions_collide(seed):
    task = make("countdown", 1500, 300, seed, SMALL_COUNTDOWN)
    train = {p.question for p in task.problems("train")}
    heldout = {p.question for p in task.problems("heldout")}
    assert len(train) == 1500 and len(heldout) == 300 and not train & heldout


def test_stored_solutions_score_one(task):
    for problem in list(task.problems("heldout")) + list(task.problems("train")):
        assert problem.solution is not None and not problem.solution.endswith("\n")
        assert problem.solution.isascii() and problem.question.isascii()
        assert problem.solution.endswith(f"\nAnswer: {problem.answer}")
        assert task.reward(problem, problem.solution) == 1.0


def test_malformed_responses_score_zero(task):
    problem = task.problems("heldout")[0]
    for response in MALFORMED + [problem.answer, problem.solution.replace("Answer:", "answer:")]:
        assert task.reward(problem, response) == 0.0


def test_default_countdown_config_has_enough_problems():
    # Arithmetic chains have about 5e8 distinct questions under the defaults; countdown has about
    # 1.3e7, but only 1.4e5 with three numbers, so it is worth generating at full size.
    task = make("countdown", 50_000, 1000, 1234)
    train = {p.question for p in task.problems("train")}
    heldout = {p.question for p in task.problems("heldout")}
    assert len(train) == 50_000 and len(heldout) == 1000 and not train & heldout


@pytest.mark.parametrize(
    "family, cfg, key",
    [
        ("countdown", CountdownSettings(min_numbers=2, max_numbers=2, max_number=3), "task.countdown.max_number"),
        ("arithmetic", ArithmeticSettings(min_terms=2, max_terms=2, max_digits=1), "task.arithmetic.max_digits"),
    ],
)
def test_too_few_questions_is_a_clear_error(family, cfg, key):
    with pytest.raises(ValueError, match=re.escape(key)):
        make(family, 50_000, 1000, 0, cfg).problems("train")


def test_bad_ranges_rejected():
    with pytest.raises(ConfigError, match="max_numbers"):
        CountdownTask(CountdownSettings(max_numbers=6), 10, 10, 0)
    with pytest.raises(ConfigError, match="min_numbers"):
        CountdownTask(CountdownSettings(min_numbers=1), 10, 10, 0)
    with pytest.raises(ConfigError, match="min_terms"):
        ArithmeticTask(ArithmeticSettings(min_terms=5, max_terms=4), 10, 10, 0)


@pytest.mark.parametrize(
    "overrides, key, bound",
    [
        (["task=countdown", f"task.countdown.max_numbers={MAX_NUMBERS + 1}"], "task.countdown.min_numbers", f"max_numbers <= {MAX_NUMBERS}"),
        (["task=arithmetic", f"task.arithmetic.max_digits={MAX_DIGITS + 1}"], "task.arithmetic.max_digits", f"<= {MAX_DIGITS}"),
    ],
)
def test_a_task_refuses_its_own_settings_at_composition_by_the_bounds_its_module_defines(overrides, key, bound):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    assert err.value.key == key and bound in str(err.value)
    # another task's settings are that task's own: they are not checked while they cannot take effect
    assert compose_config([f"task.countdown.max_numbers={MAX_NUMBERS + 1}", "task=arithmetic"]).cfg.task.name == "arithmetic"


# ------------------------------------------------------------------------------------ countdown


def countdown_problem(numbers: list[int], target: int) -> Problem:
    return Problem("countdown-test-0", countdown_question(numbers, target), str(target))


def test_countdown_question_format():
    assert countdown_question([3, 5, 7, 2], 24) == "Use 3 5 7 2 to make 24."
    assert parse_question("Use 3 5 7 2 to make 24.") == ([3, 5, 7, 2], 24)
    with pytest.raises(ValueError):
        parse_question("Compute 1+2.")


@pytest.mark.parametrize(
    "numbers, target, response",
    [
        ([3, 5, 7, 2], 24, "5*3=15\n15+7=22\n22+2=24\nAnswer: 24"),
        ([3, 5, 7, 2], 24, "7+5=12\n12*2=24\nAnswer: 24"),
        ([3, 5, 7, 2], 24, "5+7=12\n2*12=24\nAnswer: 24"),
        ([3, 5, 7, 2], 24, "3*7=21\n21+5=26\n26-2=24\nAnswer: 24"),
        ([3, 5, 7, 2], 24, "7 + 5 = 12\n12*2=24\nAnswer:24\n"),
        ([5, 5, 2], 10, "5+5=10\nAnswer: 10"),
        ([4, 9, 6], 1, "9-4=5\n6-5=1\nAnswer: 1"),
        ([4, 4, 9], 9, "4-4=0\n0+9=9\nAnswer: 9"),
    ],
)
def test_countdown_accepts_valid_solutions(numbers, target, response):
    assert check_solution(numbers, target, response)
    assert CountdownTask(CountdownSettings(), 1, 1, 0).reward(countdown_problem(numbers, target), response) == 1.0


@pytest.mark.parametrize(
    "response",
    [
        "7*3=24\nAnswer: 24",  # wrong arithmetic
        "2-7=5\n5*5=25\nAnswer: 24",  # wrong arithmetic (and 5 used twice)
        "3*7=21\n21+3=24\nAnswer: 24",  # 3 used twice
        "6*4=24\nAnswer: 24",  # numbers not given
        "5+7=12\n12+12=24\nAnswer: 24",  # an intermediate result used twice
        "15+7=22\n5*3=15\n22+2=24\nAnswer: 24",  # a result used before it is computed
        "5*3=15\n15+7=22\nAnswer: 24",  # last result is not the target
        "7+5=12\n12*2=24\n24-3=21\nAnswer: 24",  # last result is not the target
        "5*3=15\n15+7=22\n22+2=24\nAnswer: 25",  # answer line names another value
        "5*3=15\n15+7=22\n22+2=24",  # missing answer line
        "Answer: 24",  # no steps
        "5*3=15\n15+7=22\n22+2=24\nAnswer: 24\nDone.",  # text after the answer line
        "5*3=15\n\n15+7=22\n22+2=24\nAnswer: 24",  # blank line between steps
        "5x3=15\n15+7=22\n22+2=24\nAnswer: 24",  # unknown operator
        "٥*٣=١٥\n١٥+٧=٢٢\n٢٢+٢=٢٤\nAnswer: ٢٤",  # non-ASCII digits
    ],
)
def test_countdown_rejects_invalid_solutions(response):
    assert not check_solution([3, 5, 7, 2], 24, response)


def test_countdown_rejects_division():
    assert not check_solution([48, 2], 24, "48/2=24\nAnswer: 24")


def brute_force(numbers: list[int], target: int) -> set[tuple[str, ...]]:
    """Every solution of the allowed shape (no 0 results, no *1, no unused or repeated-target
    intermediate), with + and * operands written larger first."""
    found: set[tuple[str, ...]] = set()

    def search(pool: list[tuple[int, bool]], steps: tuple[str, ...]) -> None:
        for i in range(len(pool)):
            for j in range(i + 1, len(pool)):
                (x, _), (y, _) = pool[i], pool[j]
                rest = [p for n, p in enumerate(pool) if n not in (i, j)]
                big, small = max(x, y), min(x, y)
                moves = [(big + small, f"{big}+{small}={big + small}")]
                if small != 1:
                    moves.append((big * small, f"{big}*{small}={big * small}"))
                if big != small:
                    moves.append((big - small, f"{big}-{small}={big - small}"))
                for value, text in moves:
                    if value == target:
                        if not any(intermediate for _, intermediate in rest):
                            found.add(steps + (text,))
                    else:
                        search(rest + [(value, True)], steps + (text,))

    search([(n, False) for n in numbers], ())
    return found


def canonical(solution: str) -> tuple[str, ...]:
    lines = []
    for line in solution.split("\n")[:-1]:
        a, op, b, c = re.fullmatch(r"(\d+)([-+*])(\d+)=(\d+)", line).groups()
        if op != "-":
            a, b = sorted((a, b), key=int, reverse=True)
        lines.append(f"{a}{op}{b}={c}")
    return tuple(lines)


@pytest.mark.parametrize(
    "numbers, target", [([3, 5, 7, 2], 24), ([2, 2, 3, 4], 10), ([6, 1, 9], 15), ([19, 20, 17, 18], 74)]
)
def test_countdown_solutions_uniform_over_all_solutions(numbers, target):
    expected = brute_force(numbers, target)
    assert expected
    draws = 40 * len(expected)
    solutions = sample_solutions([numbers] * draws, [target] * draws, random.Random(0))
    assert all(check_solution(numbers, target, s) for s in solutions)
    counts = Counter(canonical(s) for s in solutions)
    assert set(counts) == expected
    if len(set(numbers)) == len(numbers):  # equal numbers count as distinct, so duplicates skew the draw
        assert max(counts.values()) < 3 * min(counts.values())


def test_countdown_solutions_are_diverse():
    solutions = sample_solutions([[3, 5, 7, 2]] * 200, [24] * 200, random.Random(1))
    assert len({s.split("\n")[0] for s in solutions}) >= 5
    assert {"5*3=15\n15+7=22\n22+2=24\nAnswer: 24", "3*5=15\n15+7=22\n22+2=24\nAnswer: 24"} & set(solutions)
    heldout = make("countdown", 10, 1000, 3).problems("heldout")
    assert len({p.solution.split("\n")[0] for p in heldout}) >= 150  # of about 300 possible first steps with numbers up to 10
    assert Counter(p.solution.count("\n") for p in heldout).keys() == {1, 2, 3}


def test_countdown_unreachable_target_is_an_error():
    with pytest.raises(ValueError, match="no countdown solution"):
        sample_solutions([[1, 1, 1]], [100], random.Random(0))


def test_countdown_generated_problems_follow_config():
    for problem in make("countdown", 2000, 10, 5).problems("train"):
        numbers, target = parse_question(problem.question)
        assert 3 <= len(numbers) <= 4 and all(1 <= n <= 10 for n in numbers)
        assert 1 <= target <= 200 and target not in numbers and problem.answer == str(target)


# ----------------------------------------------------------------------------------- arithmetic


def test_arithmetic_question_format():
    assert arithmetic_question([23, 45, 17], [1, 1, -1]) == "Compute 23+45-17."


@pytest.mark.parametrize(
    "terms, signs, value, first_lines",
    [
        ([23, 45, 17], [1, 1, -1], 51, {"45+23=68", "45-17=28", "23-17=6"}),
        ([80, 17, 45], [1, -1, -1], 18, {"80-17=63", "80-45=35", "45+17=62"}),
        ([5, 9, 20], [1, -1, 1], 16, {"9-5=4", "20+5=25", "20-9=11"}),
    ],
)
def test_arithmetic_worked_solutions_vary_and_hold(terms, signs, value, first_lines):
    seen = set()
    for seed in range(200):
        solution = worked_solution(terms, signs, random.Random(seed))
        lines = solution.split("\n")
        assert lines[-1] == f"Answer: {value}" and lines[-2].endswith(f"={value}") and len(lines) == len(terms)
        for line in lines[:-1]:
            a, op, b, c = re.fullmatch(r"(\d+)([-+])(\d+)=(\d+)", line).groups()
            assert int(c) == (int(a) + int(b) if op == "+" else int(a) - int(b)) >= 0
            if line == lines[0]:
                seen.add(f"{max(a, b, key=int)}+{min(a, b, key=int)}={c}" if op == "+" else line)
    assert seen == first_lines


def test_arithmetic_generated_problems_follow_config():
    cfg = ArithmeticSettings(min_terms=3, max_terms=4, max_digits=2)
    for problem in make("arithmetic", 2000, 10, 5, cfg).problems("train"):
        expression = re.fullmatch(r"Compute (\d+(?:[-+]\d+)+)\.", problem.question).group(1)
        terms = [int(t) for t in re.split("[-+]", expression)]
        assert 3 <= len(terms) <= 4 and all(1 <= t <= 99 for t in terms)
        assert problem.answer == str(eval(expression)) and int(problem.answer) >= 0


@pytest.mark.parametrize(
    "response, expected",
    [
        ("23+45=68\n68-17=51\nAnswer: 51", 1.0),
        ("Answer: 51", 1.0),
        ("Answer:51  \n", 1.0),
        ("whatever\nAnswer: 50\nAnswer: 51", 1.0),
        ("Answer: 51\nAnswer: 50", 0.0),
        ("23+45=68\n68-17=51\nAnswer: 52", 0.0),
        ("23+45=68\n68-17=51", 0.0),
        ("Answer: 51.", 0.0),
        ("Answer: 51 apples", 0.0),
        ("Answer: fifty-one", 0.0),
        ("answer: 51", 0.0),
        ("Answer: ٥١", 0.0),
    ],
)
def test_arithmetic_reward(response, expected):
    task = ArithmeticTask(ArithmeticSettings(), 1, 1, 0)
    assert task.reward(Problem("arithmetic-test-0", "Compute 23+45-17.", "51"), response) == expected
