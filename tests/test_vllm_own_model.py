"""A researcher's own model with ``engine=vllm`` on the CPU, with the defaults: sized for the command, prompts that ask for
the answer, quiet logs and a clean exit.

The model is a small random Llama of SmolLM2's layout with a real BPE tokenizer and SmolLM2's context of 8192 tokens
(:mod:`fakes.smol`): sized by that context and ``engine.batch_size``, its engine would take 1024 x 8192 tokens of KV
cache. Each command builds its own engine, compiled as a user's is (no ``engine.vllm.enforce_eager``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from conftest import SHARED_DATA, metrics, tsctl
from fakes.smol import save_smol_folder
from tsctl.io.shards import read_shard
from tsctl.models.prompts import PromptFormatter

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BOXED = "Please reason step by step, and put your final answer within \\boxed{}."
GSM8K = SHARED_DATA / "benchmarks" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="module")
def smol(tmp_path_factory) -> Path:
    return save_smol_folder(tmp_path_factory.mktemp("smol"))


def formatter(folder: Path) -> PromptFormatter:
    return PromptFormatter(AutoTokenizer.from_pretrained(folder), True)


def vllm_log(runs: Path) -> str:
    (log,) = (runs / "_logs").glob("vllm-*.log")
    return log.read_text()


def started_with(log: str) -> tuple[int, int]:
    """``max_model_len`` and ``max_num_seqs`` the engine was started with, from vLLM's own record of its arguments."""
    args = re.search(r"non-default args: (\{.*\})", log).group(1)
    return int(re.search(r"'max_model_len': (\d+)", args).group(1)), int(re.search(r"'max_num_seqs': (\d+)", args).group(1))


def assert_quiet(done) -> None:
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "Failed to load weights" not in output and "Triton" not in output and "[W" not in output


@pytest.mark.skipif(not GSM8K.is_file(), reason=f"no benchmark data at {GSM8K}")
def test_a_benchmark_eval_is_sized_by_its_prompts_and_records_its_benchmark(smol, tmp_path):
    runs = tmp_path / "runs"
    done = tsctl("eval", f"model.path={smol}", "engine=vllm", "eval.benchmarks=[gsm8k]", "eval.limit=4", "eval.k=2", "eval.pass_k=[1,2]",
                 "engine.max_new_tokens=24", f"runs_dir={runs}")
    assert_quiet(done)
    result = json.loads((runs / "default" / "eval" / smol.name / "gsm8k.json").read_text())
    assert (result["benchmark"], result["task"], result["problems"]) == ("gsm8k", "gsm8k", 4)  # not the config's task (countdown)
    questions = [json.loads(line)["question"] for line in GSM8K.read_text().splitlines()[:4]]
    longest = max(len(formatter(smol).prompt_ids(f"{q}\n{BOXED}")) for q in questions)
    assert started_with(vllm_log(runs)) == (longest + 24, 4 * 2)  # not 8192 x 1024
    assert 0 <= result["answer_found"] <= 1
    noted = "no sampled response states a final answer the grader can read" in done.stderr
    assert noted == (result["answer_found"] == 0)


def test_a_seeded_train_on_a_file_task_asks_for_the_answer_and_ends_cleanly(smol, tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"question": f"Tom has {i} apples and buys {i + 3} more. How many has he now?", "answer": str(2 * i + 3)}) + "\n" for i in range(20)))
    runs = tmp_path / "runs"
    done = tsctl("train", f"model.path={smol}", "engine=vllm", "task=file", f"task.file.train_path={data}", "task.file.solution_field=null",
                 "ratio=25", "refresh=2", "trainer.batch_size=4", "trainer.n=4", "trainer.steps=3", "trainer.save_rollouts=true",
                 "engine.max_new_tokens=24", f"runs_dir={runs}", "name=own")
    assert_quiet(done)
    assert done.stderr.strip().splitlines()[-1].startswith("run complete:")
    run = runs / "default" / "own"
    records = [r for r in metrics(run) if "reward/answer_found" in r]
    assert [r["step"] for r in records] == [1, 2, 3] and all(0 <= r["reward/answer_found"] <= 1 for r in records)
    noted = "no response of the first 3 step(s) states a final answer" in done.stderr
    assert noted == all(r["reward/answer_found"] == 0 for r in records)
    if noted:
        assert "task.file.instruction=<text>" in done.stderr
    shard = read_shard(run / "rollouts" / "step-000001.parquet", "rollout").table.to_pydict()
    tokenizer = AutoTokenizer.from_pretrained(smol)
    assert all(tokenizer.decode(ids).endswith(f"?\n{BOXED}<|im_end|>\n<|im_start|>assistant\n") for ids in shard["prompt_ids"])
    questions = [json.loads(line)["question"] for line in data.read_text().splitlines()]
    longest = max(len(formatter(smol).prompt_ids(f"{q}\n{BOXED}")) for q in questions)
    log = vllm_log(runs)
    assert started_with(log) == (longest + 24 + 1, 4 * 4)  # the longest prompt + response (+ the token after a whole-budget seed)
    assert log.count("Failed to load weights") >= 2 * 3  # every weight sync's, kept in the log


def test_a_kv_cache_beyond_the_memory_stops_before_any_run_folder_naming_what_fits(smol, tmp_path):
    runs = tmp_path / "runs"
    done = tsctl("train", f"model.path={smol}", "engine=vllm", "task=arithmetic", "task.train_size=2000", "trainer.batch_size=4096",
                 "trainer.n=16", "engine.batch_size=100000", "engine.vllm.max_model_len=8192", f"runs_dir={runs}", "name=big", check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert line.startswith("error: config error at 'engine.batch_size': vLLM's KV cache for 65536 sequences")
    assert int(re.search(r"; engine.batch_size=(\d+) fits", line).group(1)) >= 1
    assert not (runs / "default" / "big").exists()
