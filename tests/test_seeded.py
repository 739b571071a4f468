"""A sample is seeded when it was assigned a seed, even one cut at 0 (an empty prefix)."""

from __future__ import annotations

import math

import pytest
import torch

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Completion, SamplingParams
from tsctl.models.batch import collate
from tsctl.models.samples import PLAIN, PREFIX, SUFFIX, Sample
from tsctl.seeds.base import Seed
from tsctl.tasks.base import Problem
from tsctl.trainer.rewards import sample_advantages
from tsctl.trainer.rollout import Sampler, collect_groups
from tsctl.trainer.step_metrics import rollout_metrics


class ScriptedEngine:
    """Returns the i-th scripted continuation for the i-th request."""

    reports_token_stats = False

    def __init__(self, continuations: list[list[int]]) -> None:
        self.continuations = continuations

    def generate(self, requests, params):
        return [Completion(token_ids=c, logprobs=[-0.5] * len(c), finished=True) for c in self.continuations[: len(requests)]]


class Formatter:
    def prompt_ids(self, question: str) -> list[int]:
        return [1, 5]

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


class LastTokenTask:
    """Reward 1 when the response ends with token 9."""

    answer_marker = None

    def reward(self, problem: Problem, text: str) -> float:
        return 1.0 if text.split()[-1] == "9" else 0.0


def one_group() -> list[Sample]:
    """Four samples of one prompt: a seed cut at 0 (reward 1), a seed with a 2-token prefix (0), two plain (1, 0)."""
    seeds = [[Seed([], [], behaviour_step=3, checkpoint="step-3"), Seed([6, 7], [-1.0, -2.0], behaviour_step=3, checkpoint="step-3")]]
    engine = ScriptedEngine([[8, 9], [8], [9], [4, 8]])
    return collect_groups(Sampler(engine, Formatter(), LastTokenTask()), [Problem("p0", "q", "9")], seeds, 4, SamplingParams())


def test_a_seed_cut_at_zero_makes_a_seeded_sample():
    cut0, seeded, plain1, plain0 = one_group()
    assert cut0.prefix_ids == [] and cut0.seeded and cut0.behaviour_step == 3 and cut0.behaviour_checkpoint == "step-3"
    assert cut0.sources() == [SUFFIX, SUFFIX]
    assert seeded.seeded and seeded.sources() == [PREFIX, PREFIX, SUFFIX]
    assert not plain1.seeded and plain1.sources() == [PLAIN] and plain1.behaviour_step == -1
    assert [s.reward for s in (cut0, seeded, plain1, plain0)] == [1.0, 0.0, 1.0, 0.0]


def test_a_sample_built_with_a_prefix_is_seeded():
    s = Sample(group=0, prompt_id="p", prompt_ids=[1], generated_ids=[2], generated_logprobs=[0.0], finished=True, prefix_ids=[3])
    assert s.seeded


def test_plain_statistics_leave_out_a_seed_cut_at_zero():
    # adv_group=plain: statistics over the two plain samples [1, 0]: mean 0.5, std sqrt(1/2).
    cfg = TsctlConfig()
    cfg.seeds.adv_group, cfg.algo.adv_eps = "plain", 1e-6
    adv = sample_advantages(one_group(), cfg)
    s = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([s, -s, s, -s], dtype=torch.float64))


def test_metrics_count_a_seed_cut_at_zero_as_seeded():
    samples = one_group()
    batch = collate(samples, torch.zeros(4), pad_id=0)
    metrics = rollout_metrics(samples, batch, torch.zeros(batch.resp_mask.shape), [0, 4], step=5)
    assert metrics["seeds/prefix_tokens"] == 1.0  # (0 + 2) / 2 seeded samples
    assert metrics["seeds/prefix_fraction"] == pytest.approx((0 / 2 + 2 / 3) / 2)
    assert metrics["seeds/behaviour_age"] == 2.0
    assert metrics["seeds/solve_rate_seeded"] == 0.5 and metrics["seeds/solve_rate_plain"] == 0.5
    # tokens: cut0 2 suffix, seeded 2 prefix + 1 suffix, plain 1 + 2
    assert metrics["tokens_by_source/suffix"] == pytest.approx(3 / 8)
    assert metrics["tokens_by_source/plain"] == pytest.approx(3 / 8)
