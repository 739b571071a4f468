"""Prompts too long for the engine: refused before a run starts, or left out with task.overlong_prompts=drop."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import tsctl
from tsctl.config.errors import ConfigError
from tsctl.io.runs import config_changes
from tsctl.models.prompt_fit import FittingTask, PromptRoom, fitting
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.runconfig import compose_config
from tsctl.tasks.base import Problem
from tsctl.trainer.rollout import prompt_room

FORMATTER = PromptFormatter(build_char_tokenizer(), use_chat_template=False)
"""Character tokens: a question of c characters is a prompt of c + 2 tokens (BOS, the characters, a newline)."""


def problems(*sizes: int) -> list[Problem]:
    return [Problem(id=f"p{i}", question="x" * size, answer="1") for i, size in enumerate(sizes)]


def test_character_prompts_are_two_tokens_longer_than_their_question():
    assert len(FORMATTER.prompt_ids("xxxx")) == 6


def test_prompts_that_fit_are_all_kept_and_no_limit_keeps_everything():
    given = problems(8, 3, 6)
    assert fitting(given, FORMATTER, PromptRoom(context=20, max_new_tokens=10, policy="error"), "train") == given  # 10, 5, 8 <= 10
    assert fitting(given, FORMATTER, PromptRoom(context=None, max_new_tokens=10_000, policy="error"), "train") == given


def test_a_prompt_past_the_room_is_refused_with_the_counts_and_the_fixes():
    room = PromptRoom(context=20, max_new_tokens=12, policy="error")  # prompts may take 8 tokens
    with pytest.raises(ConfigError) as err:
        fitting(problems(5, 7, 9, 6), FORMATTER, room, "train")  # 7, 9, 11, 8 tokens
    text = str(err.value)
    assert err.value.key == "task.overlong_prompts"
    assert "2 of 4 train prompts are longer than the 8 tokens left to a prompt" in text
    assert "engine serves 20 tokens" in text and "engine.max_new_tokens=12" in text and "the longest prompt has 11" in text
    assert "task.overlong_prompts=drop" in text and "lower engine.max_new_tokens" in text


def test_with_seeds_a_prompt_leaves_one_more_token_for_a_prefix_that_takes_the_whole_budget():
    # A seed of max_new_tokens tokens is continued by one sampled token: prompt + max_new_tokens + 1 (trainer.rollout).
    given = problems(5, 6)  # 7 and 8 tokens
    assert fitting(given, FORMATTER, PromptRoom(context=20, max_new_tokens=12, policy="error"), "train") == given
    with pytest.raises(ConfigError, match="1 of 2 train prompts are longer than the 7 tokens.*and one for the token after a seed"):
        fitting(given, FORMATTER, PromptRoom(context=20, max_new_tokens=12, policy="error", seeded=True), "train")


class Served:
    context_length = 300


def test_a_runs_room_is_the_engines_context_less_its_responses():
    plain = prompt_room(compose_config(["engine.max_new_tokens=48"]).cfg, Served())
    seeded = prompt_room(compose_config(["engine.max_new_tokens=48", "ratio=25", "task.overlong_prompts=drop"]).cfg, Served())
    assert (plain.longest_prompt, plain.policy) == (252, "error")
    assert (seeded.longest_prompt, seeded.policy) == (251, "drop")

def test_drop_keeps_the_prompts_that_fit_in_their_order(capsys):
    given = problems(5, 7, 9, 6)
    kept = fitting(given, FORMATTER, PromptRoom(context=20, max_new_tokens=12, policy="drop"), "heldout")
    assert kept == [given[0], given[3]]
    assert "heldout: left out 2 of 4 prompts" in capsys.readouterr().err  # the console writes to stderr


def test_no_prompt_left_is_an_error_even_with_drop():
    with pytest.raises(ConfigError, match="none is left"):
        fitting(problems(5, 7), FORMATTER, PromptRoom(context=20, max_new_tokens=20, policy="drop"), "train")


class TwoSplits:
    name = "two"
    answer_marker = "Answer:"

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.splits = {"train": problems(1, 30, 2), "heldout": problems(40, 3)}

    def problems(self, split):
        self.asked.append(split)
        return self.splits[split]

    def reward(self, problem, response):
        return float(response == problem.answer)


def test_a_fitting_task_filters_each_split_once_and_grades_as_its_task():
    inner = TwoSplits()
    task = FittingTask(inner, FORMATTER, PromptRoom(context=30, max_new_tokens=20, policy="drop"))
    assert (task.name, task.answer_marker) == ("two", "Answer:")
    assert [p.question for p in task.problems("train")] == ["x", "xx"]
    assert [p.question for p in task.problems("heldout")] == ["xxx"]
    task.problems("train")
    assert inner.asked == ["train", "heldout"]  # kept, not checked again
    assert task.reward(inner.splits["train"][0], "1") == 1.0 and task.reward(inner.splits["train"][0], "2") == 0.0


def test_the_key_is_one_of_error_and_drop():
    assert compose_config([]).cfg.task.overlong_prompts == "error"
    with pytest.raises(ConfigError, match="task.overlong_prompts"):
        compose_config(["task.overlong_prompts=cut"])


def test_a_run_saved_before_the_key_existed_resumes_when_the_key_has_its_default():
    saved = compose_config([]).node
    older = OmegaConf.create(OmegaConf.to_container(saved))
    del older.task["overlong_prompts"]
    assert config_changes(older, saved) == ""
    assert config_changes(older, compose_config(["task.overlong_prompts=drop"]).node) == 'task.overlong_prompts (absent) -> "drop"'


@pytest.mark.slow
def test_train_refuses_prompts_with_no_room_before_making_the_run(micro, tmp_path):
    # The micro model serves 256 tokens; 250 for the response leave 6, shorter than any arithmetic prompt.
    proc = tsctl("train", *micro, "name=long", "engine.max_new_tokens=250", "algo.overlong_buffer=8", check=False)
    line = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2 and "Traceback" not in line
    assert "train prompts are longer than the 6 tokens left to a prompt" in line and "none is left" in line
    assert not (tmp_path / "runs" / "default" / "long").exists()
