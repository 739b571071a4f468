"""End-to-end ``tsctl train`` on micro sizes: parameters move, metrics are complete, resume is exact."""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from conftest import kill, metrics, stable_metrics, tsctl
from safetensors.torch import load_file

pytestmark = pytest.mark.slow


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
    base = Path(manifest["base_model"]["path"])  # the cache is shared by the session: other tests' configs have folders of their own
    assert base.parent == model_cache and base.name.startswith("builtin-arithmetic-")
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


def test_sigkill_between_a_steps_log_and_its_checkpoint_then_resume_logs_the_same_metrics(micro, tmp_path):
    args = [*micro, "trainer.steps=6", "trainer.save_every=2", "trainer.eval_every=3"]
    tsctl("train", *args, "name=full")
    run = tmp_path / "runs" / "default" / "killed"
    kill([*args, "name=killed"], ("step-logged", 4))  # steps 0..4 logged (an evaluation at 3), step-4's checkpoint not yet written
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]
    tsctl("train", *args, "name=killed", "resume=true")
    full, resumed = stable_metrics(tmp_path / "runs" / "default" / "full"), stable_metrics(run)
    assert [r["step"] for r in resumed] == [r["step"] for r in full] == list(range(7))
    for a, b in zip(full, resumed):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), (a["step"], key)
