"""One meaning of "solved" (reward >= 1) in every evaluation: warm-up score, held-out metrics, final_eval, tsctl eval."""

from __future__ import annotations

import pytest

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Completion
from tsctl.evaluation.scoring import final_eval, greedy_accuracy, heldout_metrics, sample_and_score, solve_rates
from tsctl.tasks.base import Problem

PROBLEMS = [Problem(id=f"h{i}", question=f"q{i}", answer="") for i in range(4)]


class GradedEngine:
    """Answers request ``j`` with the token ``j``: greedy (temperature 0) and sampled calls alike."""

    def generate(self, requests, params):
        return [Completion(token_ids=[j], logprobs=[0.0], finished=True) for j in range(len(requests))]


class Formatter:
    def prompt_ids(self, question: str) -> list[int]:
        return [1]

    def decode(self, ids) -> str:
        return str(ids[0])


class PartialTask:
    """Reward of the response to request ``j``: 1, 0.5, 0 or 1.5 in turn (0.5 is partial credit, not solved)."""

    name = "partial"
    answer_marker = None

    def problems(self, split):
        return PROBLEMS

    def reward(self, problem: Problem, response: str) -> float:
        return (1.0, 0.5, 0.0, 1.5)[int(response) % 4]


def config(samples: int) -> TsctlConfig:
    cfg = TsctlConfig()
    cfg.trainer.eval_problems = cfg.trainer.eval_samples_problems = 4
    cfg.trainer.eval_samples = samples
    cfg.eval.k, cfg.eval.pass_k = samples, [1, 2]
    return cfg


def test_greedy_accuracy_counts_rewards_of_at_least_one():
    # Greedy responses 0..3 get rewards 1, 0.5, 0, 1.5: two solved (the mean reward would be 0.75).
    assert greedy_accuracy(GradedEngine(), Formatter(), PartialTask(), PROBLEMS, 8) == 0.5


def test_held_out_metrics_of_training_count_solved_responses():
    metrics = heldout_metrics(GradedEngine(), Formatter(), PartialTask(), config(samples=2), step=3)
    # Sampled requests 0..7 (2 per problem): rewards 1, .5, 0, 1.5, 1, .5, 0, 1.5: half solved (mean reward 0.75).
    assert metrics["eval/greedy_accuracy"] == 0.5 and metrics["eval/pass@1"] == 0.5


def test_final_eval_records_solved_per_problem():
    record = final_eval(GradedEngine(), Formatter(), PartialTask(), config(samples=2), step=7)
    assert record["per_problem"]["greedy"] == {"ids": ["h0", "h1", "h2", "h3"], "solved": [1, 0, 0, 1]}
    assert record["per_problem"]["sampled"]["solved"] == [1, 1, 1, 1]  # each problem: one of its two samples
    assert record["greedy_accuracy"] == 0.5 and record["pass@1"] == 0.5 and record["pass@2"] == 1.0
    assert record["step"] == 7 and record["samples"] == 2


def test_tsctl_eval_solve_rates_count_the_same():
    engine, formatter, task = GradedEngine(), Formatter(), PartialTask()
    sampled = sample_and_score(engine, formatter, task, PROBLEMS, params=None, n=2)
    greedy = sample_and_score(engine, formatter, task, PROBLEMS, params=None)
    assert sampled.solved.tolist() == [[True, False], [False, True], [True, False], [False, True]]
    rates = solve_rates(sampled, greedy, [2])
    assert rates == {"greedy_accuracy": 0.5, "pass@1": 0.5, "pass@2": pytest.approx(1.0)}
