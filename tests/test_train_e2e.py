"""End-to-end ``tsctl train`` on micro sizes: parameters move, metrics are complete, resume is exact."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import tsctl
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

VOLATILE = ("time/", "tokens_per_s", "eval/seconds")


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def stable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not any(v_ in k for v_ in VOLATILE)}


def test_train_updates_every_parameter_and_logs_all_metrics(micro, tmp_path, model_cache):
    tsctl("train", *micro, "name=a")
    run = tmp_path / "runs" / "default" / "a"
    records = metrics(run)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    step = records[1]
    for key in (
        "reward/mean", "reward/std", "accuracy", "zero_variance_groups", "entropy", "clip_low", "clip_high",
        "kl_k3", "grad_norm", "response_length/mean", "response_length/max", "truncation_rate",
        "generate_tokens_per_s", "train_tokens_per_s", "time/generate", "time/update", "entropy_by_pos/0-3",
        "entropy_by_rel/00-10", "clipped_by_pos/0-3", "lr", "forward_token_share",
    ):
        assert key in step, key
    assert 0 < step["forward_token_share"] < 1  # the samples of a prompt share its forward
    assert "eval/greedy_accuracy" in records[0] and "eval/pass@1" in records[2]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and "torch" in manifest["versions"]
    assert manifest["arithmetic"] == {"device": "cpu", "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads()}
    assert {r["torch_threads"] for r in records[1:]} == {torch.get_num_threads()}  # this process's: the same environment
    base = next(model_cache.glob("builtin-*"))
    assert json.loads((base / "warmup.json").read_text())["arithmetic"]["device"] == "cpu"
    digest = hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest()[:12]
    assert manifest["base_model"] == {"path": str(base), "weights_sha256": digest}  # the weights it started from
    before = load_file(base / "model.safetensors")
    after = load_file(run / "checkpoints" / "step-3" / "model.safetensors")
    assert before.keys() == after.keys()
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert unchanged == []


def test_existing_run_is_never_overwritten(micro, tmp_path):
    tsctl("train", *micro, "name=b", "trainer.steps=1")
    again = tsctl("train", *micro, "name=b", "trainer.steps=1", check=False)
    assert again.returncode == 2
    assert "already exists" in again.stderr and "resume=true" in again.stderr
    assert "Traceback" not in again.stderr


def test_sigkill_mid_step_then_resume_logs_the_same_metrics(micro, tmp_path):
    args = [*micro, "trainer.steps=6", "trainer.save_every=2", "trainer.eval_every=3"]
    tsctl("train", *args, "name=full")
    env = {**os.environ, "TSCTL_NO_PROGRESS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tsctl", "train", *args, "name=killed"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run = tmp_path / "runs" / "default" / "killed"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").is_file() and len(metrics(run)) >= 4:  # steps 0..3 logged, step 4 running
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (run / "checkpoints" / "step-2").is_dir()
    tsctl("train", *args, "name=killed", "resume=true")
    full, resumed = metrics(tmp_path / "runs" / "default" / "full"), metrics(run)
    assert [r["step"] for r in resumed] == [r["step"] for r in full]
    for a, b in zip(full, resumed):
        a, b = stable(a), stable(b)
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), (a["step"], key)
