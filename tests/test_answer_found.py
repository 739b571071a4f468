"""Prompts that ask for the answer, and the share of responses that state one: a file task's instruction (by grader, or
the user's), ``reward/answer_found`` in every step's record, and the one line when the first steps hold no answer."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import metrics, micro_args, tsctl
from fakes.qwen import qwen_like_tokenizer
from tsctl.models.batch import collate
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import Sample
from tsctl.runconfig import compose_config
from tsctl.tasks.file_task import FileTask, FileTaskSettings
from tsctl.tasks.grading import answer_found
from tsctl.trainer.no_answer import NoAnswerWatch
from tsctl.trainer.step_metrics import rollout_metrics

BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
LINE = 'Please reason step by step, and end your response with a line "Answer: <final answer>".'


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(10)))
    return path


@pytest.mark.parametrize("settings, ask", [
    ({}, BOXED),                                             # math_verify: the benchmarks' request
    ({"grader": "numeric"}, LINE),
    ({"grader": "exact", "answer_pattern": "Final:"}, LINE.replace("Answer:", "Final:")),
    ({"instruction": "Answer in one word."}, "Answer in one word."),
])
def test_a_file_tasks_prompt_asks_for_the_answer_in_the_form_its_grader_reads(data, settings, ask):
    task = FileTask(FileTaskSettings(train_path=str(data), solution_field=None, heldout_fraction=0.2, **settings), data_seed=0)
    assert all(p.question.endswith(f"?\n{ask}") for split in ("train", "heldout") for p in task.problems(split))
    formatter = PromptFormatter(qwen_like_tokenizer(), True)
    prompt = formatter.tokenizer.decode(formatter.prompt_ids(task.problems("train")[0].question))
    assert prompt == f"<|im_start|>user\nWhat is 0 + 0?\n{ask}<|im_end|>\n<|im_start|>assistant\n"


def test_an_empty_instruction_adds_none(data):
    task = FileTask(FileTaskSettings(train_path=str(data), solution_field=None, instruction=""), data_seed=0)
    assert [p.question for p in task.problems("train")][:2] == ["What is 0 + 0?", "What is 1 + 1?"]


@pytest.mark.parametrize("text, found", [
    ("so the total is \\boxed{18}.", True), ("9 + 9 = 18\n#### 18", True), ("Answer: 42", True),
    ("I think it is 18", False), ("Answer:", False), ("\\boxed{}", False),
])
def test_a_final_answer_is_found_where_the_grader_reads_one(text, found):
    assert answer_found(text, "Answer:") is found


def test_each_step_logs_the_share_of_responses_with_an_answer():
    samples = [Sample(group=i // 2, prompt_id=str(i), prompt_ids=[1, 2], generated_ids=[3, 4], generated_logprobs=[-1.0, -1.0], finished=True,
                      answer_found=i in (0, 3, 4)) for i in range(8)]
    batch = collate(samples, torch.zeros(8), 0, torch.device("cpu"))
    record = rollout_metrics(samples, batch, torch.zeros(batch.resp_mask.shape), [0, 1], 0)
    assert record["reward/answer_found"] == 3 / 8


def records(*found: float) -> list[dict[str, float]]:
    return [{"reward/answer_found": value} for value in found]


def test_a_run_whose_first_steps_state_no_answer_is_told_why_once_naming_the_setting(data):
    cfg = compose_config(["task=file", f"task.file.train_path={data}", "model.path=some/model"]).cfg
    watch = NoAnswerWatch(cfg, steps=10)
    notes = [watch.see(record) for record in records(0, 0, 0, 0, 0)]
    assert notes[:2] == [None, None] and notes[3:] == [None, None]
    assert notes[2].startswith("no response of the first 3 step(s) states a final answer the grader can read (reward/answer_found 0)")
    assert "task.file.instruction=<text>" in notes[2]
    some = NoAnswerWatch(cfg, 10)
    assert [some.see(r) for r in records(0, 0.1, 0)] == [None, None, None]  # some answer: nothing to say
    short = NoAnswerWatch(cfg, 2)
    assert [short.see(r) for r in records(0, 0)][1].startswith("no response of the first 2 step(s)")


def test_a_task_without_an_instruction_setting_names_its_warm_up():
    watch = NoAnswerWatch(compose_config(["task=arithmetic"]).cfg, steps=1)
    assert "warm the model up on the task's worked solutions" in watch.see({"reward/answer_found": 0.0})


@pytest.mark.slow
def test_a_warmed_up_model_states_answers_and_hears_no_note(tmp_path, model_cache):
    args = micro_args(tmp_path / "runs", model_cache)
    done = tsctl("train", *args, "name=answers")
    found = [r["reward/answer_found"] for r in metrics(tmp_path / "runs" / "default" / "answers") if "reward/answer_found" in r]
    assert len(found) == 3 and min(found) > 0.5  # the micro model ends its responses with its "Answer:" line
    assert "states a final answer" not in done.stdout + done.stderr
