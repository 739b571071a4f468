"""The reward controls ``task.reward=correct|random|format`` (``task.reward_p``; Shao et al., "Spurious Rewards", arXiv
2506.10947): each sample's training reward by hand, the random draws reproducible per run seed, step and sample, the
refusals, and micro trains whose held-out evaluation still grades correctness."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from tsctl.config.errors import ConfigError
from tsctl.config.rng import Stream, step_seed
from tsctl.config.schema.task import TaskConfig
from tsctl.engines.base import Completion, SamplingParams
from tsctl.runconfig import compose_config
from tsctl.tasks.base import Problem
from tsctl.tasks.reward_controls import TrainingReward, training_reward
from tsctl.trainer.rollout import Sampler, collect_groups

TEXTS = {1: "Answer: 4", 2: "Answer: 5", 3: "no idea"}
"""Token -> response text: the right answer, a wrong one in the task's format, no answer at all."""


class ScriptedEngine:
    """Returns one token, the i-th of ``tokens``, for the i-th request."""

    reports_token_stats = False

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def generate(self, requests, params):
        return [Completion(token_ids=[t], logprobs=[-0.5], finished=True) for t in self.tokens[: len(requests)]]


class Formatter:
    def prompt_ids(self, question: str) -> list[int]:
        return [7]

    def decode(self, ids: list[int]) -> str:
        return TEXTS[ids[0]]


class FourTask:
    """Gold answer 4 on an ``Answer:`` line."""

    answer_marker = "Answer:"

    def reward(self, problem: Problem, text: str) -> float:
        return 1.0 if text == f"Answer: {problem.answer}" else 0.0


def rewards(control: TrainingReward, tokens: list[int], groups: int = 1, first_group: int = 0) -> list[float]:
    """The training rewards of ``groups`` groups of ``len(tokens) // groups`` samples answering with ``tokens``."""
    sampler = Sampler(ScriptedEngine(tokens), Formatter(), FourTask(), control)
    problems = [Problem(f"p{i}", "q", "4") for i in range(groups)]
    return [s.reward for s in collect_groups(sampler, problems, None, len(tokens) // groups, SamplingParams(), first_group=first_group)]


def test_correct_is_the_grade_and_format_is_any_readable_answer():
    # right, wrong in format, no answer: graded 1, 0, 0; in format 1, 1, 0
    assert rewards(TrainingReward(), [1, 2, 3]) == [1.0, 0.0, 0.0]
    assert rewards(TrainingReward("format"), [1, 2, 3]) == [1.0, 1.0, 0.0]


def test_random_draws_one_uniform_per_sample_from_the_step_seed_group_and_place():
    control = TrainingReward("random", 0.3, seed=11)
    # sample j of group g (numbered from first_group=5): 1 when Generator([11, g, j]).random() < 0.3, whatever it answers
    want = [float(np.random.default_rng([11, g, j]).random() < 0.3) for g in (5, 6) for j in range(4)]
    assert rewards(control, [1, 2, 3, 1, 3, 3, 2, 1], groups=2, first_group=5) == want
    assert rewards(control, [3, 3, 3, 3, 1, 1, 1, 1], groups=2, first_group=5) == want
    assert 0 < sum(want) < 8  # both values occur, so the check above can fail


def test_random_rewards_have_mean_p_and_differ_by_step():
    control = TrainingReward("random", 0.3, seed=step_seed(0, 4, Stream.REWARD))
    draws = [control(0.0, False, g, j) for g in range(500) for j in range(8)]
    assert set(draws) == {0.0, 1.0} and abs(np.mean(draws) - 0.3) < 0.02  # 4000 Bernoulli(0.3): std of the mean 0.007
    cfg = TaskConfig(reward="random", reward_p=0.3)
    assert training_reward(cfg, 0, 4) == control and Stream.REWARD == 9
    later = training_reward(cfg, 0, 5)
    assert [later(0.0, False, g, 0) for g in range(64)] != [control(0.0, False, g, 0) for g in range(64)]


@pytest.mark.parametrize("overrides, command, key, words", [
    (["task.reward=spurious"], "train", "task.reward", "unknown value 'spurious'; choose one of correct, random, format"),
    (["task.reward=random", "task.reward_p=0"], "train", "task.reward_p", "allowed: 0 < task.reward_p < 1"),
    (["task.reward=random", "task.reward_p=1.0"], "train", "task.reward_p", "allowed: 0 < task.reward_p < 1"),
    (["task.reward=format", "task.reward_p=0.3"], "train", "task.reward_p", "it is read only with task.reward=random (got format)"),
    (["task.reward=random"], "eval", "task.reward", "tsctl eval does not read it"),
])
def test_bad_values_are_refused_in_one_line(overrides, command, key, words):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, idle=True, command=command)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value)


def test_good_values_compose():
    cfg = compose_config(["task.reward=random", "task.reward_p=0.25"], idle=True, command="train").cfg
    assert (cfg.task.reward, cfg.task.reward_p) == ("random", 0.25)
    assert compose_config(["task.reward=format"], idle=True, command="rollout").cfg.task.reward == "format"


def records(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0, 25])
def test_a_micro_train_on_random_rewards_draws_them_per_sample(micro, tmp_path, ratio):
    from tsctl.stages.train import train

    train(compose_config([*micro, "name=random", f"ratio={ratio}", "task.reward=random", "task.reward_p=0.5", "trainer.eval_every=0",
                          "trainer.save_rollouts=true", "seed=3"], idle=True))
    run = tmp_path / "runs" / "default" / "random"
    assert [r["step"] for r in records(run)] == [1, 2, 3]
    shards = sorted((run / "rollouts").glob("*.parquet"))
    assert len(shards) == 3
    for step, shard in enumerate(shards):
        table = pq.read_table(shard).to_pydict()
        place = {g: 0 for g in table["group"]}
        want = []
        for g in table["group"]:  # each group's samples in order: its seeded ones first, then the plain ones
            want.append(float(np.random.default_rng([step_seed(3, step, Stream.REWARD), g, place[g]]).random() < 0.5))
            place[g] += 1
        assert table["reward"] == want
        assert sum(b != -1 for b in table["behaviour_step"]) == len(want) * ratio // 100


@pytest.mark.slow
@pytest.mark.parametrize("control", ["task.reward=random", "task.reward=format"])
def test_held_out_evaluation_still_grades_correctness(micro, tmp_path, control):
    from tsctl.stages.train import train

    common = [*micro, "trainer.steps=1", "trainer.eval_every=1", "ratio=25"]
    train(compose_config([*common, "name=correct"], idle=True))
    train(compose_config([*common, "name=control", control], idle=True))
    correct, controlled = (records(tmp_path / "runs" / "default" / name) for name in ("correct", "control"))
    # step 0 evaluates the same starting model in both runs: the same grades unless the control reached the evaluation
    keys = [k for k in correct[0] if k.startswith("eval/") and k != "eval/seconds"]
    assert "eval/greedy_accuracy" in keys and 0 < correct[0]["eval/greedy_accuracy"] < 1
    assert {k: controlled[0][k] for k in keys} == {k: correct[0][k] for k in keys}
    # while the training reward is the control's: the same samples (same seed and weights), other rewards
    assert controlled[1]["reward/answer_found"] == correct[1]["reward/answer_found"]
    assert controlled[1]["reward/mean"] != correct[1]["reward/mean"]
    if control == "task.reward=format":
        assert controlled[1]["reward/mean"] == controlled[1]["reward/answer_found"]
