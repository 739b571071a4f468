"""Truncation strategies: invariants over random responses, exact picks, schedules, the registry."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tsctl.config.registry import Registry
from tsctl.config.schema import SeedsConfig
from tsctl.seeds import truncation
from tsctl.seeds.truncation import (
    STRATEGIES,
    CutContext,
    choose_cut,
    cut_span,
    find_answer_start,
    schedule_fraction,
)

EOS = 0
NL = 1
NAMES = ("boundary", "entropy", "fixed", "schedule", "uniform")
"""The built-in strategies that cut one response on their own (``target_pass``, the seed controller, has its own tests)."""


def random_case(rng: np.random.Generator) -> tuple[list[int], CutContext, SeedsConfig]:
    """A random response (maybe empty, maybe EOS-terminated), context and config."""
    length = int(rng.integers(0, 40))
    ids = rng.integers(0, 8, size=length).tolist()
    if length and rng.random() < 0.5:
        ids[-1] = EOS
    answer_start = int(rng.integers(0, length + 3)) if rng.random() < 0.5 else None
    total = int(rng.integers(1, 200))
    ctx = CutContext(
        eos_id=EOS,
        entropies=rng.random(length).tolist(),
        boundary_ids={NL},
        answer_start=answer_start,
        step=int(rng.integers(0, total + 5)),
        total_steps=total,
    )
    lo, hi = sorted(rng.random(2))
    cfg = SeedsConfig(
        fraction=float(rng.random()),
        lo=float(lo),
        hi=float(hi),
        entropy_window=float(rng.random()),
        schedule=str(rng.choice(["linear", "cosine"])),
        schedule_start=float(rng.random()),
        schedule_end=float(rng.random()),
        exclude_answer=bool(rng.random() < 0.7),
    )
    return ids, ctx, cfg


def test_registry_has_every_strategy() -> None:
    assert set(NAMES) | {"target_pass"} <= set(STRATEGIES.names())


@pytest.mark.parametrize("name", [*NAMES, "target_pass"])
def test_invariants_over_random_cases(name: str) -> None:
    rng = np.random.default_rng(7)
    for _ in range(400):
        ids, ctx, cfg = random_case(rng)
        cut = choose_cut(name, ids, ctx, cfg, np.random.default_rng(int(rng.integers(1 << 30))))
        assert 0 <= cut <= len(ids)
        assert EOS not in ids[:cut]
        if cfg.exclude_answer and ctx.answer_start is not None:
            assert cut <= ctx.answer_start
        if not ids:
            assert cut == 0


@pytest.mark.parametrize("name", NAMES)
def test_same_rng_state_same_cut(name: str) -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        ids, ctx, cfg = random_case(rng)
        cuts = {choose_cut(name, ids, ctx, cfg, np.random.default_rng(11)) for _ in range(3)}
        assert len(cuts) == 1


def test_span_stops_at_first_eos_and_answer() -> None:
    cfg = SeedsConfig(exclude_answer=True)
    assert cut_span([5, 6, 7, EOS], CutContext(eos_id=EOS), cfg) == 3
    assert cut_span([5, EOS, 7, EOS], CutContext(eos_id=EOS), cfg) == 1
    assert cut_span([5, 6, 7, 8], CutContext(eos_id=EOS, answer_start=2), cfg) == 2
    keep_answer = replace(cfg, exclude_answer=False)
    assert cut_span([5, 6, 7, 8], CutContext(eos_id=EOS, answer_start=2), keep_answer) == 4
    assert cut_span([5, 6, 7, 8], CutContext(eos_id=None), cfg) == 4


def test_fixed_rounds_half_up_over_the_span() -> None:
    ids = [5] * 9 + [EOS]  # span 9
    ctx = CutContext(eos_id=EOS)
    rng = np.random.default_rng(0)
    assert choose_cut("fixed", ids, ctx, SeedsConfig(fraction=0.5), rng) == 5  # 4.5 -> 5
    assert choose_cut("fixed", ids, ctx, SeedsConfig(fraction=0.0), rng) == 0
    assert choose_cut("fixed", ids, ctx, SeedsConfig(fraction=1.0), rng) == 9


def test_uniform_stays_in_range_and_varies() -> None:
    ids = [5] * 100
    cfg = SeedsConfig(lo=0.2, hi=0.8)
    rng = np.random.default_rng(0)
    cuts = [choose_cut("uniform", ids, CutContext(eos_id=EOS), cfg, rng) for _ in range(500)]
    assert min(cuts) >= 20 and max(cuts) <= 80
    assert len(set(cuts)) > 30


def test_boundary_moves_to_nearest_step_end() -> None:
    # boundary tokens at 2 and 6: cuts just after them are 3 and 7
    ids = [5, 5, NL, 5, 5, 5, NL, 5, 5, 5]
    ctx = CutContext(eos_id=EOS, boundary_ids={NL})
    rng = np.random.default_rng(0)
    assert choose_cut("boundary", ids, ctx, SeedsConfig(lo=0.4, hi=0.4), rng) == 3  # target 4 -> 3
    assert choose_cut("boundary", ids, ctx, SeedsConfig(lo=0.6, hi=0.6), rng) == 7  # target 6 -> 7
    assert choose_cut("boundary", ids, ctx, SeedsConfig(lo=0.5, hi=0.5), rng) == 3  # target 5: tie -> earlier
    assert choose_cut("boundary", ids, ctx, SeedsConfig(lo=0.9, hi=0.9), rng) == 7  # target 9 -> 7


def test_boundary_respects_answer_and_falls_back_without_boundaries() -> None:
    ids = [5, NL, 5, 5, NL, 9, 9, 9]  # answer line starts at 5
    ctx = CutContext(eos_id=EOS, boundary_ids={NL}, answer_start=5)
    cfg = SeedsConfig(lo=0.9, hi=0.9)
    assert choose_cut("boundary", ids, ctx, cfg, np.random.default_rng(0)) == 5
    no_boundary = CutContext(eos_id=EOS, boundary_ids={NL})
    cfg = SeedsConfig(lo=0.3, hi=0.3)
    assert choose_cut("boundary", [5] * 10, no_boundary, cfg, np.random.default_rng(0)) == 3


def test_entropy_cuts_before_the_fork_in_the_window() -> None:
    ids = [5] * 10
    entropies = [0.1, 0.5, 0.2, 0.9, 0.3, 2.0, 0.1, 0.1, 0.1, 0.1]
    rng = np.random.default_rng(0)
    ctx = CutContext(eos_id=EOS, entropies=entropies)
    assert choose_cut("entropy", ids, ctx, SeedsConfig(entropy_window=0.5), rng) == 3  # window 0..4
    assert choose_cut("entropy", ids, ctx, SeedsConfig(entropy_window=0.6), rng) == 5  # window 0..5
    assert choose_cut("entropy", ids, ctx, SeedsConfig(entropy_window=0.0), rng) == 0  # at least one token
    ties = CutContext(eos_id=EOS, entropies=[0.1, 0.7, 0.7, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert choose_cut("entropy", ids, ties, SeedsConfig(entropy_window=0.5), rng) == 1


def test_entropy_window_is_a_fraction_of_the_span() -> None:
    ids = [5, 5, 5, 5, 9, 9, 9, EOS]  # answer at 4, so the span is 4
    entropies = [0.1, 0.2, 0.3, 0.4, 5.0, 5.0, 5.0, 0.0]
    ctx = CutContext(eos_id=EOS, entropies=entropies, answer_start=4)
    assert choose_cut("entropy", ids, ctx, SeedsConfig(entropy_window=1.0), np.random.default_rng(0)) == 3


def test_entropy_needs_matching_entropies() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="per-token entropies"):
        choose_cut("entropy", [5, 5], CutContext(eos_id=EOS), SeedsConfig(), rng)
    with pytest.raises(ValueError, match="1 values for a response of 2 tokens"):
        choose_cut("entropy", [5, 5], CutContext(eos_id=EOS, entropies=[0.1]), SeedsConfig(), rng)


@pytest.mark.parametrize(
    ("schedule", "step", "expected"),
    [
        ("linear", 0, 0.8),
        ("linear", 50, 0.45),  # 0.8 - 0.7 * 0.5
        ("linear", 25, 0.625),  # 0.8 - 0.7 * 0.25
        ("linear", 100, 0.1),
        ("linear", 150, 0.1),  # past the end stays at the end
        ("cosine", 0, 0.8),
        ("cosine", 50, 0.45),  # 0.1 + 0.7 * (1 + cos(pi/2)) / 2
        ("cosine", 25, 0.1 + 0.7 * (1 + math.sqrt(0.5)) / 2),  # 0.69749...
        ("cosine", 100, 0.1),
    ],
)
def test_schedule_fraction(schedule: str, step: int, expected: float) -> None:
    cfg = SeedsConfig(schedule=schedule, schedule_start=0.8, schedule_end=0.1)
    assert schedule_fraction(cfg, step, 101) == pytest.approx(expected)  # steps 0..100


def test_schedule_edges() -> None:
    cfg = SeedsConfig(schedule="linear", schedule_start=0.8, schedule_end=0.1)
    assert schedule_fraction(cfg, 0, 1) == pytest.approx(0.8)  # a one-step run stays at the start
    assert schedule_fraction(cfg, 1, 2) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="total_steps"):
        schedule_fraction(cfg, 0, 0)


def test_schedule_strategy_shrinks_the_prefix() -> None:
    ids = [5] * 100
    cfg = SeedsConfig(schedule="cosine", schedule_start=0.8, schedule_end=0.1)
    rng = np.random.default_rng(0)
    contexts = [CutContext(eos_id=EOS, step=s, total_steps=101) for s in (0, 25, 50, 100)]
    cuts = [choose_cut("schedule", ids, ctx, cfg, rng) for ctx in contexts]
    assert cuts == [80, 70, 45, 10]


def test_unknown_names_list_the_valid_ones() -> None:
    rng = np.random.default_rng(0)
    valid = "fixed, uniform, boundary, entropy, schedule"
    with pytest.raises(ValueError, match=f"unknown truncation strategy 'random'; valid: {valid}"):
        choose_cut("random", [5], CutContext(eos_id=EOS), SeedsConfig(), rng)
    with pytest.raises(ValueError, match="unknown seeds.schedule 'step'; valid names: cosine, linear"):
        choose_cut("schedule", [5], CutContext(eos_id=EOS), SeedsConfig(schedule="step"), rng)


def test_registry_rejects_duplicates_and_bad_cuts(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="'fixed' is already registered"):
        STRATEGIES.register("fixed")(lambda *args: 0)
    broken = Registry("truncation strategy")
    broken.register("too_long")(lambda ids, span, ctx, cfg, rng: span + 1)
    monkeypatch.setattr(truncation, "STRATEGIES", broken)
    with pytest.raises(ValueError, match="'too_long' returned cut 4 outside \\[0, 3\\]"):
        choose_cut("too_long", [5, 5, 5], CutContext(eos_id=EOS), SeedsConfig(), np.random.default_rng(0))


def test_context_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="answer_start"):
        CutContext(eos_id=EOS, answer_start=-1)
    with pytest.raises(ValueError, match="total_steps"):
        CutContext(eos_id=EOS, total_steps=0)


def test_find_answer_start() -> None:
    marker = [7, 8]
    assert find_answer_start([5, NL, 7, 8, 3, EOS], marker) == 2
    assert find_answer_start([7, 8, NL, 7, 8, 3], marker) == 3  # the last occurrence
    assert find_answer_start([5, 7, 5, 8], marker) is None
    assert find_answer_start([], marker) is None
    # only at a line start: the mid-line marker at 1 is ignored, the one after NL counts
    assert find_answer_start([5, 7, 8, NL, 7, 8, 4, 5, 7, 8], marker, line_start_after={NL}) == 4
    assert find_answer_start([7, 8, 4], marker, line_start_after={NL}) == 0
    assert find_answer_start([5, 7, 8], marker, line_start_after={NL}) is None
    with pytest.raises(ValueError, match="empty"):
        find_answer_start([1, 2], [])


def test_answer_start_feeds_the_cut() -> None:
    ids = [5, 5, NL, 5, 5, NL, 7, 8, 3, EOS]
    ctx = CutContext(eos_id=EOS, answer_start=find_answer_start(ids, [7, 8]))
    assert choose_cut("fixed", ids, ctx, SeedsConfig(fraction=1.0), np.random.default_rng(0)) == 6
