"""The tests behind every verdict call a difference about 5% of the time when there is none, their 95% intervals
cover a real difference about 95% of the time, and Holm keeps a family's chance of any false call at 5%.

Nulls and effects are simulated with the variance components of the held-out scores of every sweep with
committed records, estimated here, at test time, from those records (``docs/results/<sweep>/runs/*/final_eval.json``,
``per_problem``): for each point of a sweep, the ``[seeds, P problems]`` table of per-problem scores goes through
:func:`~tsctl.analysis.crossed.variance_components` (pass@1: ``sampled.solved / samples`` with that many samples;
pass@8: whether any sample solved the problem, one answer; greedy: ``greedy.solved``, one answer), and each component
is the mean over the sweep's points.

Warm-up models as a random unit (:mod:`~tsctl.analysis.nested`) are simulated with the nested variance components of
ratio 25 - ratio 0 over the records' two warm-up models at lr 2e-4 (``countdown-collapse-ratio`` and
``countdown-collapse-base``: the same sweep from weights eaf58e73a9de and 19bf82bc2fbf), in the records' design (two
warm-up models of five seeds) and in one of four warm-up models of two seeds: the nested test's size, coverage and
family-wise error under Holm, and how often the test of one fixed warm-up model calls a null a difference.
"""

import functools
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats as scipy_stats

from tsctl.io.run_records import is_record
from tsctl.analysis import nested
from tsctl.analysis.crossed import Components, crossed_difference, crossed_differences, mean_squares, variance_components
from tsctl.analysis.families import holm
from tsctl.analysis.stats import paired_difference

RECORDS = Path(__file__).resolve().parents[1] / "docs" / "results"
SEEDS = 5
METRICS = ("greedy", "pass@1", "pass@8")


@functools.cache
def point_tables(sweep: Path) -> dict[str, list[dict]]:
    """The final evaluations of sweep folder ``sweep``'s records, by point (its overrides less the seed); read once."""
    points: dict[str, list[dict]] = defaultdict(list)
    for record in sorted(p for p in (sweep / "runs").iterdir() if is_record(p)):
        overrides = yaml.safe_load((record / ".hydra" / "overrides.yaml").read_text())
        point = " ".join(sorted(o for o in overrides if not o.startswith("seed=")))
        points[point].append(json.loads((record / "final_eval.json").read_text())["per_problem"])
    return points


def scores(per_problem: dict, metric: str) -> tuple[np.ndarray, int]:
    """One run's per-problem scores of ``metric`` and the answers each is a share of."""
    if metric == "greedy":
        return np.asarray(per_problem["greedy"]["solved"], dtype=np.float64), 1
    sampled = per_problem["sampled"]
    solved = np.asarray(sampled["solved"], dtype=np.float64)
    return (solved / sampled["samples"], sampled["samples"]) if metric == "pass@1" else ((solved > 0).astype(np.float64), 1)


def components_of(sweep: Path, metric: str) -> tuple[Components, int]:
    """The mean over ``sweep``'s points (of 2+ seeds) of the variance components of ``metric``, and its problems."""
    found, problems = [], 0
    for runs in point_tables(sweep).values():
        if len(runs) < 2:
            continue
        table = [scores(r, metric) for r in runs]
        problems = table[0][0].size
        found.append(variance_components(np.stack([t[0] for t in table]), samples=table[0][1]))
    if not found:
        pytest.skip(f"{sweep.name} has no point with 2+ recorded seeds")
    mean = {k: float(np.mean([getattr(c, k) for c in found])) for k in ("seed", "problem", "seed_x_problem", "binomial")}
    return Components(**mean), problems


SWEEPS = sorted(p.name for p in RECORDS.iterdir() if (p / "runs").is_dir() and any(is_record(r) for r in (p / "runs").iterdir()))
"""Every sweep with committed records."""
CASES = [(sweep, metric) for sweep in SWEEPS for metric in METRICS]

SIMULATIONS = 2000
"""Simulations per case: a rate's standard error is about 0.5 points at 5% (and at 95%)."""


def test_the_records_give_the_components_of_every_sweep_the_page_shows():
    assert {"countdown-ratio", "arithmetic-ratio", "countdown-collapse-ratio"} <= set(SWEEPS)
    collapse, _ = components_of(RECORDS / "countdown-collapse-ratio", "greedy")
    default, _ = components_of(RECORDS / "countdown-ratio", "greedy")
    assert collapse.seed > 50 * default.seed  # greedy accuracy's seeds spread about 100x more where plain DAPO degrades


def null_pairs(components: Components, problems: int, rng: np.random.Generator, n: int, interaction: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` draws of two settings' ``[SEEDS, problems]`` scores with the same distribution (``[n, SEEDS, problems]``
    each): per draw a shared problem difficulty, and each run its own seed effect, seed-by-problem and binomial noise
    (Gaussian, at the components' variances). ``interaction`` > 0 adds a problem-by-setting effect of that variance,
    mean 0 over the population of problems."""
    difficulty = rng.normal(0.0, math.sqrt(components.problem), (n, 1, problems))

    def setting() -> np.ndarray:
        own = rng.normal(0.0, math.sqrt(interaction), (n, 1, problems)) if interaction else 0.0
        seed = rng.normal(0.0, math.sqrt(components.seed), (n, SEEDS, 1))
        cell = rng.normal(0.0, math.sqrt(components.seed_x_problem + components.binomial), (n, SEEDS, problems))
        return 0.5 + difficulty + own + seed + cell

    return setting(), setting()


def rejection_rates(components: Components, problems: int, seed: int, interaction: float = 0.0) -> tuple[float, float]:
    """The shares of :data:`SIMULATIONS` nulls that the test over seeds and problems, and the paired t over
    the seeds' mean scores (scipy's), reject at 5%."""
    a, b = null_pairs(components, problems, np.random.default_rng(seed), SIMULATIONS, interaction)
    crossed = float((crossed_differences(a, b).p < 0.05).mean())
    paired = float((scipy_stats.ttest_rel(a.mean(axis=2), b.mean(axis=2), axis=1).pvalue < 0.05).mean())
    return crossed, paired


@pytest.mark.parametrize("sweep,metric", CASES)
def test_false_positive_rate_is_five_percent_under_simulated_nulls(sweep, metric):
    components, problems = components_of(RECORDS / sweep, metric)
    crossed, paired = rejection_rates(components, problems, seed=CASES.index((sweep, metric)))
    assert 0.03 <= crossed <= 0.07, f"{sweep} {metric}: the test over seeds and problems rejects {crossed:.1%} of nulls"
    assert 0.03 <= paired <= 0.07, f"{sweep} {metric}: the paired t over seeds rejects {paired:.1%} of nulls"


@pytest.mark.parametrize("sweep,metric", CASES)
def test_the_95_percent_interval_covers_a_planted_difference_95_percent_of_the_time(sweep, metric):
    components, problems = components_of(RECORDS / sweep, metric)
    rng = np.random.default_rng(100 + CASES.index((sweep, metric)))
    effect = 2 * math.sqrt(components.seed_x_problem + components.binomial + components.seed)  # a difference of a few points
    a, b = null_pairs(components, problems, rng, SIMULATIONS)
    found = crossed_differences(a + effect, b)
    covered = float(((found.low <= effect) & (effect <= found.high)).mean())
    assert 0.93 <= covered <= 0.97, f"{sweep} {metric}: the interval covers the planted {effect:.3f} {covered:.1%} of the time"


@pytest.mark.parametrize("metric", METRICS)
def test_holm_keeps_the_chance_of_any_false_call_in_a_family_at_five_percent(metric):
    # a family of 10 null comparisons, one per sweep (repeated) with that sweep's components: the chance that Holm
    # calls any of them a difference is at most 5%, within two standard errors of the 1000 simulated families
    cases = [components_of(RECORDS / sweep, metric) for sweep in SWEEPS]
    family = [cases[i % len(cases)] for i in range(10)]
    rng = np.random.default_rng(200 + METRICS.index(metric))
    families = 1000
    p = np.stack([crossed_differences(*null_pairs(c, n, rng, families)).p for c, n in family], axis=1)  # [families, 10]
    any_call = sum(min(holm(list(row))) < 0.05 for row in p)
    rate = any_call / families
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / families), f"{metric}: Holm calls some null a difference in {rate:.1%} of families"


def test_crossed_differences_of_a_stack_are_each_table_s_crossed_difference():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(4, 3, 5)), rng.normal(size=(4, 3, 5))
    a[1], b[1] = 0.25, 0.0  # a flat difference: no spread, p 0
    found = crossed_differences(a, b)
    for i in range(4):
        one = crossed_difference(a[i], b[i])
        assert (found.mean[i], found.se[i], found.low[i], found.high[i], found.p[i]) == pytest.approx(
            (one.diff.mean, one.diff.std, one.diff.low, one.diff.high, one.p_value))
    assert (found.p[1], found.low[1], found.high[1]) == pytest.approx((0.0, 0.25, 0.25))
    with pytest.raises(ValueError, match="pairs, seeds, problems"):
        crossed_differences(a[0], b[0])


def test_problem_by_setting_effects_that_average_out_are_not_called_a_difference():
    # the setting moves each problem's solve rate up or down (variance 0.02: by about 0.14), by 0 on average over
    # the population of problems: the paired t over seeds takes the drawn problems' mean effect for a real one,
    # the test over seeds and problems counts it as the noise of drawing them
    components, problems = components_of(RECORDS / "countdown-ratio", "pass@1")
    crossed, paired = rejection_rates(components, problems, seed=7, interaction=0.02)
    assert 0.03 <= crossed <= 0.07
    assert paired > 0.1


def test_mean_squares_of_a_two_by_two_table():
    # seed means 0.875, 0.25: MS_seed = (0.875 - 0.25)^2 = 0.390625; problem means 0.75, 0.375: MS_problem =
    # 0.375^2 = 0.140625; the cell residual is +-(1 - 0.75 - 0.5 + 0)/4 = -+0.0625 in each cell: MS_cell = 4 * 0.0625^2
    ms = mean_squares(np.array([[1.0, 0.75], [0.5, 0.0]]))
    assert (ms.seed, ms.problem, ms.cell, ms.seeds, ms.problems) == pytest.approx((0.390625, 0.140625, 0.015625, 2, 2))


def test_variance_components_of_a_hand_made_table():
    scores = np.array([[1.0, 0.75], [0.5, 0.0]])
    # greedy (one answer per problem): no binomial part; seed = (0.390625 - 0.015625) / 2 problems,
    # problem = (0.140625 - 0.015625) / 2 seeds, seed x problem = MS_cell
    greedy = variance_components(scores)
    assert (greedy.seed, greedy.problem, greedy.seed_x_problem, greedy.binomial) == pytest.approx((0.1875, 0.0625, 0.015625, 0.0))
    # shares of 4 answers: y (1 - y) = 0, 0.1875, 0.25, 0, mean 0.109375, / (4 - 1) = 0.0364583; it exceeds MS_cell,
    # so seed x problem is floored at 0
    sampled = variance_components(scores, samples=4)
    assert (sampled.seed, sampled.problem, sampled.seed_x_problem, sampled.binomial) == pytest.approx((0.1875, 0.0625, 0.0, 0.109375 / 3))


def test_variance_components_refuse_a_table_of_one_seed():
    with pytest.raises(ValueError, match="at least 2"):
        variance_components(np.array([[1.0, 0.0, 1.0]]))


def test_crossed_difference_is_the_paired_t_when_problems_agree():
    # d = [[0.5, 0.25], [0, 0.25]]: MS_seed = (0.375 - 0.125)^2 = 0.0625, MS_problem = 0 < MS_cell = 0.5^2 / 4:
    # V = 0.0625 / 4, se 0.125, t = 0.25 / 0.125 = 2 on 1 df (Cauchy): p = 1 - 2 atan(2) / pi
    setting = np.array([[0.5, 0.25], [0.0, 0.25]])
    result = crossed_difference(setting, np.zeros((2, 2)))
    assert (result.diff.mean, result.diff.std, result.diff.n) == pytest.approx((0.25, 0.125, 2))
    assert result.p_value == pytest.approx(1 - 2 * math.atan(2) / math.pi)
    assert result.p_value == pytest.approx(paired_difference(setting.mean(axis=1), [0.0, 0.0]).p_value)
    assert result.method == "seeds and problems"


def test_crossed_difference_adds_what_the_problems_disagree_beyond_the_cells():
    # d = [[0.6, 0, 0.3], [0.3, -0.3, 0.6]]: mean 0.25; seed means 0.3, 0.2: MS_seed = 3 * 2 * 0.05^2 = 0.015;
    # problem means 0.45, -0.15, 0.45: MS_problem = 2 * (0.2^2 + 0.4^2 + 0.2^2) / 2 = 0.24; cells +-0.1, +-0.1, +-0.2:
    # MS_cell = 0.12 / 2 = 0.06. V = (0.015 + 0.24 - 0.06) / 6 = 0.0325; Satterthwaite df = 0.195^2 /
    # (0.015^2 / 1 + 0.24^2 / 2 + 0.06^2 / 2) = 0.038025 / 0.030825
    result = crossed_difference(np.array([[0.6, 0.0, 0.3], [0.3, -0.3, 0.6]]), np.zeros((2, 3)))
    se, df = math.sqrt(0.0325), 0.038025 / 0.030825
    half = scipy_stats.t.ppf(0.975, df) * se
    assert (result.diff.mean, result.diff.std) == pytest.approx((0.25, se))
    assert (result.diff.low, result.diff.high) == pytest.approx((0.25 - half, 0.25 + half))
    assert result.p_value == pytest.approx(2 * scipy_stats.t.sf(0.25 / se, df))


def test_crossed_difference_without_spread_and_with_one_problem():
    same = crossed_difference(np.ones((3, 4)), np.ones((3, 4)))
    assert (same.diff.mean, same.diff.low, same.diff.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    shifted = crossed_difference(np.ones((3, 4)), np.zeros((3, 4)))
    assert (shifted.diff.low, shifted.diff.high, shifted.p_value) == (1.0, 1.0, 0.0)
    one = crossed_difference(np.array([[0.5], [0.0], [0.25]]), np.zeros((3, 1)))
    assert one.p_value == pytest.approx(paired_difference([0.5, 0.0, 0.25], [0.0, 0.0, 0.0]).p_value)


def test_crossed_difference_refuses_one_seed_and_mismatched_shapes():
    with pytest.raises(ValueError, match=">= 2 seeds"):
        crossed_difference(np.ones((1, 4)), np.ones((1, 4)))
    with pytest.raises(ValueError, match="one shape"):
        crossed_difference(np.ones((2, 4)), np.ones((2, 3)))


WARMUP_SWEEPS = ("countdown-collapse-ratio", "countdown-collapse-base")
"""The same sweep (countdown, lr 2e-4, ratio 0 and 25, seeds 0-4) from two warm-up models (weights eaf58e73a9de and
19bf82bc2fbf): the records' only measure of how much the warm-up model moves a difference between settings."""
DESIGNS = ((2, 5), (4, 2))
"""(warm-up models, seeds each): the records' design, and four warm-up models of two seeds."""
WARMUP_CASES = [(metric, design) for metric in METRICS for design in DESIGNS]
WARMUP_IDS = [f"{metric}-{w}x{s}" for metric, (w, s) in WARMUP_CASES]


@functools.cache
def warmup_components(metric: str) -> tuple[nested.Components, int]:
    """The nested variance components (:func:`~tsctl.analysis.nested.variance_components`) of ratio 25 - ratio 0 on
    ``metric`` over the two warm-up models' records ``[2, 5, P]``, and the problems to simulate: P, at most 256 (greedy's
    1000 would cost four times the time and memory; the warm-up model's term dominates either way)."""
    def table(sweep: str, ratio: int) -> np.ndarray:
        runs = sorted((RECORDS / sweep / "runs").glob(f"ratio={ratio}-seed=*"))
        return np.stack([scores(json.loads((r / "final_eval.json").read_text())["per_problem"], metric)[0] for r in runs])

    d = np.stack([table(sweep, 25) - table(sweep, 0) for sweep in WARMUP_SWEEPS])
    return nested.variance_components(d), min(d.shape[2], 256)


def nested_nulls(c: nested.Components, problems: int, design: tuple[int, int], rng: np.random.Generator, n: int,
                 problem_effect: float = 0.0) -> np.ndarray:
    """``n`` draws of a paired difference's ``[W, S, problems]`` table with mean 0 (``[n, W, S, problems]``, Gaussian at
    the components' variances); ``problem_effect`` > 0 adds that variance to the problem component."""
    w, s = design
    return (rng.normal(0.0, math.sqrt(c.warmup), (n, w, 1, 1)) + rng.normal(0.0, math.sqrt(c.seed), (n, w, s, 1))
            + rng.normal(0.0, math.sqrt(c.problem + problem_effect), (n, 1, 1, problems))
            + rng.normal(0.0, math.sqrt(c.warmup_x_problem), (n, w, 1, problems)) + rng.normal(0.0, math.sqrt(c.residual), (n, w, s, problems)))


def nested_rates(metric: str, design: tuple[int, int], seed: int, effect: float = 0.0, problem_effect: float = 0.0,
                 simulations: int = SIMULATIONS) -> tuple[float, float, float]:
    """Under :func:`nested_nulls` (plus ``effect``), in chunks of 500 tables: the share of the nested test's intervals
    that miss ``effect`` (its rejections when 0), and the shares of nulls that the two-way test of the first warm-up
    model's ``[S, P]`` table alone (one fixed warm-up model, as every section of the page), and of all runs taken as
    seeds of one model, reject at 5%."""
    c, problems = warmup_components(metric)
    rng = np.random.default_rng(seed)
    missed, fixed, pooled = [], [], []
    for _ in range(simulations // 500):
        d = nested_nulls(c, problems, design, rng, 500, problem_effect) + effect
        zero = np.zeros_like(d)
        found = nested.nested_differences(d, zero)
        missed.append((found.low > effect) | (effect > found.high))
        fixed.append(crossed_differences(d[:, 0], zero[:, 0]).p < 0.05)
        flat = d.reshape(500, -1, problems)
        pooled.append(crossed_differences(flat, np.zeros_like(flat)).p < 0.05)
    return tuple(float(np.concatenate(x).mean()) for x in (missed, fixed, pooled))


def test_the_records_two_warm_ups_move_a_difference_more_than_its_seeds_do():
    # pass@8 of ratio 25 - ratio 0: +0.085 from one warm-up model, -0.023 from the other, 5 seeds each over 256 problems:
    # warm-up 0.0056, seed 0.00004, problem 0, warm-up x problem 0.021, residual 0.23; in the records' design the
    # warm-up model's term is 95% of the mean difference's variance
    c, problems = warmup_components("pass@8")
    terms = nested.contributions(c, 2, 5, problems)
    total = terms.warmup + terms.seed + terms.problem + terms.warmup_x_problem + terms.residual
    assert problems == 256 and c.warmup > 100 * c.seed and terms.warmup / total > 0.9


@pytest.mark.parametrize("metric,design", WARMUP_CASES, ids=WARMUP_IDS)
def test_the_nested_test_calls_five_percent_of_nulls_where_a_fixed_warm_up_model_calls_many(metric, design):
    # the nested test, on W - 1 degrees of freedom, is exact when the problems agree and conservative otherwise: 3.5-5%
    nested_rate, fixed, pooled = nested_rates(metric, design, seed=300 + WARMUP_CASES.index((metric, design)))
    assert 0.025 <= nested_rate <= 0.06, f"{metric} {design}: the nested test rejects {nested_rate:.1%} of nulls"
    # one warm-up model's intervals miss what the next warm-up model would find: 14-63% of nulls called, fewest at
    # two seeds per warm-up model (one degree of freedom); all runs taken as seeds of one model, 12-48%
    assert fixed > 0.1, f"{metric} {design}: one fixed warm-up model's test rejects only {fixed:.1%} of nulls"
    assert pooled > 0.1, f"{metric} {design}: all runs taken as seeds of one model reject only {pooled:.1%} of nulls"


@pytest.mark.parametrize("metric,design", WARMUP_CASES, ids=WARMUP_IDS)
def test_the_nested_95_percent_interval_covers_a_planted_difference_95_percent_of_the_time(metric, design):
    c, _ = warmup_components(metric)
    missed, _, _ = nested_rates(metric, design, seed=400 + WARMUP_CASES.index((metric, design)), effect=2 * math.sqrt(c.warmup))
    assert 0.94 <= 1 - missed <= 0.98, f"{metric} {design}: the interval covers the planted difference {1 - missed:.1%} of the time"


def test_the_nested_test_counts_problem_effects_that_average_out_as_noise():
    # a problem-by-setting effect of variance 0.02 (as in the two-way case above): the problems disagree beyond the
    # warm-up-by-problem noise, and the nested test counts them as the noise of drawing the problems, conservatively
    # (about 2.5% of nulls called; Satterthwaite's degrees of freedom would call 6.6%, and 3 times the nominal share at
    # the 0.05 / 12 a Holm family of 12 needs)
    rate, _, _ = nested_rates("pass@1", (4, 2), seed=8, problem_effect=0.02)
    assert 0.01 <= rate <= 0.06


def test_holm_keeps_the_chance_of_any_false_call_among_nested_tests_at_five_percent():
    # a family of 12 null comparisons, each metric and design twice: Holm calls any of them a difference in at most 5%
    # of 1000 simulated families, within two standard errors
    rng = np.random.default_rng(500)
    families = 1000
    tables = (nested_nulls(*warmup_components(metric), design, rng, families) for metric, design in WARMUP_CASES * 2)
    p = np.stack([nested.nested_differences(d, np.zeros_like(d)).p for d in tables], axis=1)  # [families, 12]
    rate = sum(min(holm(list(row))) < 0.05 for row in p) / families
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / families), f"Holm calls some nested null a difference in {rate:.1%} of families"

