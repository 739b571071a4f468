"""The seed controller (``truncation=target_pass``): hand-computed choices, the shrinkage, what a step adds to its
log, the placed shard, and a run killed and resumed that makes the same choices."""

import json

import pyarrow.parquet as pq
import pytest

from conftest import kill, stable_metrics, tsctl
from tsctl.config.schema import TsctlConfig
from tsctl.models.samples import Sample
from tsctl.seeds.base import seeds_from_table
from tsctl.seeds.controller import Controller, State, choose, predict, prompt_rate, step_cells
from tsctl.runconfig import compose_config


def cfg(**seeds: float) -> TsctlConfig:
    """Defaults, ``truncation=target_pass`` (target 0.5, band 0.2, prior 4) and ``seeds``."""
    return compose_config(["ratio=25", "truncation=target_pass", *(f"seeds.{k}={v}" for k, v in seeds.items())]).cfg


def test_a_prompt_that_mostly_fails_gets_a_right_response_cut_late():
    # lift of bin 3 (fractions .75-1) of right responses: 2.0 over 4 samples, shrunk: 2 / (4 + 4) = 0.25; no other cell
    cells = {"3/right": (2.0, 4)}
    # pass rate 0.1 < 0.5 - 0.2: only the right response (index 1, span 10) is allowed; bins 0-2 predict 0.1,
    # bin 3 0.1 + 0.25 = 0.35, the nearest 0.5: cut at round(0.875 * 10) = 9; then the tie at 0.1 goes to bin 0: cut 1
    assert choose([(20, False), (10, True)], 2, 0.1, cells, cfg()) == [(1, 9, pytest.approx(0.35)), (1, 1, pytest.approx(0.1))]


def test_a_prompt_that_mostly_passes_gets_a_wrong_response():
    # lift of bin 0 of wrong responses: -3 / (4 + 4) = -0.375; at pass rate 0.9 only the wrong response (span 20) is
    # allowed: bin 0 predicts 0.525 (cut round(0.125 * 20) = 3), the others 0.9 (bin 1: cut round(7.5 + 0.5) = 8)
    assert choose([(20, False), (10, True)], 2, 0.9, {"0/wrong": (-3.0, 4)}, cfg()) == [(0, 3, pytest.approx(0.525)), (0, 8, pytest.approx(0.9))]


def test_a_prompt_in_between_takes_any_response_and_a_prompt_with_only_wrong_ones_still_gets_seeds():
    # at 0.5 every response is allowed: the right one's bin 3 predicts 0.75, the wrong one's bin 1 0.45, and every
    # unmeasured cell the prompt's own 0.5, on target: the first response's shortest cut, round(0.125 * 8) = 1
    cells = {"3/right": (2.0, 4), "1/wrong": (-0.4, 4)}
    assert choose([(8, False), (8, True)], 1, 0.5, cells, cfg())[0] == (0, 1, pytest.approx(0.5))
    # measured everywhere but the right response's bin 3, the wrong one's bin 1 (0.45) is the nearest
    everywhere = {f"{b}/{c}": (-2.0, 4) for b in range(4) for c in ("right", "wrong")} | cells
    assert choose([(8, False), (8, True)], 1, 0.5, everywhere, cfg())[0] == (0, 3, pytest.approx(0.45))
    # failing (0.1) with no right response: every response stays allowed
    assert choose([(8, False), (8, False)], 1, 0.1, cells, cfg())[0][0] == 0


def test_the_target_and_the_prior_are_the_controller_s_settings():
    cells = {"3/right": (2.0, 4)}
    # prior 1: lift 2 / 5 = 0.4 and bin 3 predicts 0.5 at pass rate 0.1; target 0.1: bin 0 (0.1) is exact
    assert choose([(10, True)], 1, 0.1, cells, cfg(controller_prior=1))[0] == (0, 9, pytest.approx(0.5))
    assert choose([(10, True)], 1, 0.1, cells, cfg(target_pass=0.1))[0] == (0, 1, pytest.approx(0.1))
    assert predict(0.95, 3, True, cells, 4.0) == 1.0  # clipped


def test_a_prompt_s_pass_rate_is_shrunk_toward_the_task_s():
    # 1 of 2 graded responses right, task rate 0.3, prior 4: (1 + 4 * 0.3) / (2 + 4)
    assert prompt_rate(1.0, 2, 0.3, 4.0) == pytest.approx(2.2 / 6)
    assert prompt_rate(0.0, 0, 0.3, 4.0) == pytest.approx(0.3)  # no history: the task's


def sample(group: int, reward: float, seeded: bool = False, fraction: float | None = None, right: bool = False, prompt: str = "p") -> Sample:
    return Sample(group=group, prompt_id=prompt, prompt_ids=[1], generated_ids=[2], generated_logprobs=[0.0], finished=True, reward=reward,
                  seeded=seeded, seed_fraction=fraction, seed_reward=1.0 if right else 0.0)


def test_a_step_adds_each_seeded_sample_s_lift_over_its_group_s_plain_pass_rate():
    samples = [
        sample(0, 1.0, prompt="a"), sample(0, 0.0, prompt="a"),  # plain pass rate 0.5
        sample(0, 1.0, True, 0.6, right=True, prompt="a"),  # bin 2, right: 1 - 0.5
        sample(0, 0.0, True, 0.1, prompt="a"),  # bin 0, wrong: 0 - 0.5
        sample(1, 1.0, True, 0.9, right=True, prompt="b"),  # a group without plain samples: left out
    ]
    assert step_cells(samples) == {"cells": {"2/right": [0.5, 1], "0/wrong": [-0.5, 1]}, "plain": [1.0, 2], "prompts": {"a": [1.0, 2]}}


def test_the_state_before_a_window_sums_the_earlier_steps_only(tmp_path):
    controller = Controller(tmp_path / "controller.jsonl", compose_config(["ratio=25", "refresh=2", "truncation=target_pass"]).cfg)
    for step, rate in ((1, 1.0), (2, 0.0), (3, 0.0)):
        controller.observe(step, [sample(0, rate, prompt="a"), sample(0, 1.0, True, 0.9, right=True, prompt="a")])
    # before 0-based step 2 (lines 1 and 2): lifts 0 and 1; the last window (steps 0..1) passed 1 of 2 plain samples
    assert controller.state(2) == State({"3/right": (1.0, 2)}, 0.5, {"a": (1.0, 2)})
    controller.truncate(1)
    assert controller.state(2) == State({"3/right": (0.0, 1)}, 1.0, {"a": (1.0, 1)})


def test_placed_seeds_are_rows_of_the_window_s_graded_responses_with_the_controller_s_cuts(tmp_path):
    config = compose_config(["ratio=25", "refresh=2", "truncation=target_pass"]).cfg
    controller = Controller(tmp_path / "controller.jsonl", config)
    columns = {"prompt_id": ["a", "a"], "response_ids": [[5] * 10, [6] * 20], "cut": [2, 2], "span": [10, 20],
               "behaviour_reward": [1.0, 0.0], "predicted": [None, None], "logprobs": [[-0.1] * 10, [-0.2] * 20]}
    assert controller.place(columns, 2, 2) == columns  # nothing measured yet: the default cuts
    controller.observe(1, [sample(0, 0.0, prompt="x"), sample(0, 1.0, True, 0.9, right=True, prompt="x")])
    controller.observe(2, [sample(0, 0.0, prompt="x"), sample(0, 1.0, True, 0.9, right=True, prompt="x")])
    # lift of 3/right: 2 / (2 + 4) = 1/3; task rate 0 (two plain failures); prompt a: 1 right of 2 graded, shrunk:
    # (1 + 4 * 0) / (2 + 4) = 1/6 < 0.3: right responses only (row 0): bin 3 predicts 1/6 + 1/3 = 0.5, cut 9 of 10
    placed = controller.place(columns, 2, 2)
    assert placed["response_ids"] == [[5] * 10, [5] * 10] and placed["cut"] == [9, 1]
    assert placed["predicted"] == [pytest.approx(0.5), pytest.approx(1 / 6)]
    seeds = seeds_from_table(placed | {"checkpoint_step": [2, 2], "checkpoint": ["step-2", "step-2"]})
    assert [s.fraction for s in seeds] == [0.9, 0.1] and [s.behaviour_reward for s in seeds] == [1.0, 1.0]


@pytest.mark.slow
def test_a_controlled_run_killed_and_resumed_makes_the_same_choices_and_logs_what_it_measured(micro, tmp_path):
    args = [*micro, "ratio=50", "refresh=1", "truncation=target_pass", "trainer.steps=4", "trainer.save_every=2", "trainer.eval_every=0"]
    tsctl("train", *args, "name=full")
    kill([*args, "name=killed"], ("step-logged", 3))
    tsctl("train", *args, "name=killed", "resume=true")
    full, killed = tmp_path / "runs" / "default" / "full", tmp_path / "runs" / "default" / "killed"
    assert (full / "seeds" / "controller.jsonl").read_text() == (killed / "seeds" / "controller.jsonl").read_text()
    for shard in sorted((full / "seeds").glob("step-*.parquet")):
        assert shard.read_bytes() == (killed / "seeds" / shard.name).read_bytes(), shard.name
    assert stable_metrics(full) == stable_metrics(killed)
    records = stable_metrics(full)
    lines = [json.loads(line) for line in (full / "seeds" / "controller.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4] and any(line["cells"] for line in lines)
    placed = [pq.read_table(s).column("predicted").to_pylist() for s in sorted((full / "seeds").glob("step-*.parquet"))]
    assert all(p is None for p in placed[0])  # the first window: nothing measured, the default cuts
    assert any(p is not None for window in placed[1:] for p in window)
    assert all("controller/placed" in r for r in records) and any(r["controller/placed"] > 0 for r in records)
    assert any("controller/predicted" in r and "controller/realised" in r for r in records)
