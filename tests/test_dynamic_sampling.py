"""DAPO dynamic sampling: all-equal groups are dropped and refilled from fresh prompts, up to a limit."""

from __future__ import annotations

import pytest

from tsctl.engines.base import Completion
from tsctl.runconfig import compose_config
from tsctl.tasks.base import Problem
from tsctl.tasks.schedule import extra_prompts, step_prompts
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.rollout import Sampler, sample_groups

N = 4


class AlternatingEngine:
    """Request j gets the one-token response ``j % 2``: every group has two of each."""

    def generate(self, requests, params):
        return [Completion(token_ids=[j % 2], logprobs=[0.0], finished=True) for j in range(len(requests))]


class DigitFormatter:
    def prompt_ids(self, question: str) -> list[int]:
        return [7]

    def decode(self, ids) -> str:
        return "".join(str(i) for i in ids)


class MixedOnlyTask:
    """Reward 1 for response "1" on problems whose answer is "mixed", else 0: only those groups vary."""

    answer_marker = None

    def reward(self, problem: Problem, text: str) -> float:
        return float(problem.answer == "mixed" and text == "1")


def problems_with(mixed: set[int], count: int = 60) -> list[Problem]:
    return [Problem(id=f"p{i}", question=f"q{i}", answer="mixed" if i in mixed else "flat") for i in range(count)]


def run(problems, rounds: int = 3, batch_size: int = 4):
    cfg = compose_config([f"trainer.batch_size={batch_size}", f"trainer.n={N}", "algo.dynamic_sampling=true", f"algo.max_resample_rounds={rounds}"]).cfg
    # The rollout reads no model, optimiser or scheduler: one process's ranks over no model.
    return sample_groups(0, cfg, Sampler(AlternatingEngine(), DigitFormatter(), MixedOnlyTask(), problems=problems), None, Parallel(None))


def groups_of(samples) -> dict[int, list]:
    out: dict[int, list] = {}
    for s in samples:
        out.setdefault(s.group, []).append(s)
    return out


def test_all_equal_groups_are_replaced_by_informative_refills():
    first = step_prompts(0, 0, 4, 60)
    refill = extra_prompts(0, 0, 0, 3, 60)
    # One of the step's prompts varies; the three refills of round 0 all vary.
    samples = run(problems_with({first[1], *refill}))
    groups = groups_of(samples)
    assert len(groups) == 4 and all(len(g) == N for g in groups.values())
    assert all(len({s.reward for s in g}) > 1 for g in groups.values())
    assert sorted(groups) == [1, 4, 5, 6]  # the step's group 1, then round 0's refills numbered after the batch
    assert [groups[g][0].prompt_id for g in (4, 5, 6)] == [f"p{i}" for i in refill]


def test_refilling_stops_after_max_resample_rounds():
    first = step_prompts(0, 0, 4, 60)
    round1 = extra_prompts(0, 0, 1, 3, 60)
    mixed = {first[0], round1[0]}  # round 0's three refills are flat, round 1's first one varies
    assert not mixed & set(extra_prompts(0, 0, 0, 3, 60)) and not mixed & set(first[1:])
    assert sorted(groups_of(run(problems_with(mixed), rounds=0))) == [0]  # no refill: the batch shrinks
    assert sorted(groups_of(run(problems_with(mixed), rounds=1))) == [0]  # round 0 found nothing
    # Round 1's refills are numbered from 2 x batch_size; round 2 (2 refills) finds nothing more.
    assert sorted(groups_of(run(problems_with(mixed), rounds=3))) == [0, 8]


def test_a_batch_with_no_informative_group_is_kept_whole():
    samples = run(problems_with(set()), rounds=2)
    assert sorted(groups_of(samples)) == [0, 1, 2, 3] and all(s.reward == 0 for s in samples)


@pytest.mark.slow
def test_seeded_run_with_dynamic_sampling_says_refills_carry_no_seeds(micro):
    from conftest import tsctl

    out = tsctl("train", *micro, "ratio=50", "refresh=1", "algo.dynamic_sampling=true", "trainer.steps=1", "trainer.eval_every=0")
    assert "refill prompts get no seeds" in out.stderr + out.stdout
    plain = tsctl("train", *micro, "name=plain", "algo.dynamic_sampling=true", "trainer.steps=1", "trainer.eval_every=0")
    assert "refill prompts" not in plain.stderr + plain.stdout
