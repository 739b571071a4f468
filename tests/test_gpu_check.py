"""bench/gpu_check.py on the CPU at a tiny size: it trains, and prints the JSON a GPU run prints."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tsctl.runconfig import check

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"
KEYS = {
    "ok", "device", "device_name", "torch", "transformers", "python", "settings", "model", "steps_requested", "steps_done",
    "loss_finite", "parameters_changed", "changed_fraction", "max_abs_change", "logprob_gap", "rollout_tokens_per_s",
    "update_tokens_per_s", "update_tflops", "update_mfu", "peak_tflops", "peak_source", "matmul_tflops", "peak_memory_gib",
    "compile_seconds", "compile_graphs", "process_group", "per_step", "vllm", "seconds", "error",
}


@pytest.mark.slow
def test_gpu_check_runs_on_cpu_and_reports_every_key(tmp_path):
    out = tmp_path / "check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--size", "tiny", "--steps", "2", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1  # one JSON object, nothing else on stdout
    result = json.loads(lines[0])
    assert json.loads(out.read_text()) == result
    assert set(result) == KEYS
    assert result["ok"] and result["error"] is None and result["device"] == "cpu"
    assert result["steps_done"] == 2 and result["loss_finite"] and result["parameters_changed"]
    assert 0.9 < result["changed_fraction"] <= 1 and 0 < result["max_abs_change"] < 1e-4  # lr 1e-6: tiny, but fp32 moves
    gap = result["logprob_gap"]
    assert 0 <= gap["abs_mean"] <= gap["abs_max"] < 1e-4 and abs(gap["ratio_mean"] - 1) < 1e-4  # fp32 on CPU: agree
    assert result["rollout_tokens_per_s"] > 0 and result["update_tokens_per_s"] > 0 and result["peak_memory_gib"] > 0
    assert 0 < result["update_mfu"] and result["update_tflops"] == pytest.approx(result["update_mfu"] * result["peak_tflops"])
    assert [s["step"] for s in result["per_step"]] == [1, 2]
    assert 0 < result["per_step"][0]["peak_memory_gib"] <= result["per_step"][1]["peak_memory_gib"]  # so far, each step
    assert result["process_group"] == {"backend": "gloo", "cpu_all_reduce": True}
    assert result["model"]["vocab_size"] == 512 and result["vllm"] == {"skipped": "cpu run"}
    assert result["settings"]["pack"] is True  # the packed update is the one measured
    assert result["compile_seconds"] is None and result["compile_graphs"] is None and result["per_step"][0]["time_compile"] is None


@pytest.mark.slow
def test_gpu_check_without_seeds_and_compiled_runs_no_seed_bank(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--size", "tiny", "--steps", "2", "--ratio", "0", "--micro-batch-size", "2",
           "--compile"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["error"] is None, result.get("traceback")
    assert result["steps_done"] == 2 and result["settings"]["ratio"] == 0 and result["settings"]["micro_batch_size"] == 2
    # the update compiled in its first step: one graph for its packed blocks, and a second one because a micro-batch
    # of one block has a batch size of 1, which torch.compile specialises; the second step compiles nothing new
    assert result["settings"]["compile"] is True and result["compile_graphs"] == 2
    first, second = (s["time_compile"] for s in result["per_step"])
    assert first > 0 and second == 0 and result["compile_seconds"] == pytest.approx(first)


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    return gpu_check


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_the_configs_it_runs_are_valid(device, monkeypatch):
    gpu_check = load_script()
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: True)
    args = gpu_check.parse_args(["--device", device])
    for engine in ("hf", "vllm"):
        cfg = check(gpu_check.make_config(args, Path("model"), engine))
        assert (cfg.ratio, cfg.trainer.old_logprobs, cfg.engine.name, cfg.trainer.compile) == (25.0, "recompute", engine, False)
    assert (args.size, args.steps) == (("0.5b", 4) if device == "cuda" else ("tiny", 2))


def test_update_flops_count_blocks_attention_and_the_head_on_responses():
    gpu_check = load_script()
    model = {"hidden": 2, "layers": 3, "layer_parameters": 10, "vocab_size": 5}
    # Rows of 2 + 3 and 1 + 1 tokens: 6*10*(5+2) + 12*3*2*(25+4) + 6*2*5*(3+1).
    assert gpu_check.update_flops(model, [(2, 3), (1, 1)]) == 420 + 2088 + 240


def test_a_cuda_job_s_backend_carries_cpu_tensors_too():
    """nccl alone refuses the CPU tensors the metric sums and evaluation counts all-reduce; gloo takes them."""
    from tsctl.distributed.world import backend

    assert backend(cuda=False) == "gloo"
    assert set(backend(cuda=True).split(",")) == {"cpu:gloo", "cuda:nccl"}
