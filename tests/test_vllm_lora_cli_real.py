"""``tsctl train engine=vllm model.lora.rank=8`` against real vLLM (its CPU build in CI) and real peft, end to end.

A micro run with a pool of three adapter snapshots: every step samples at the trainer's log-probs after the adapter
alone was synced (vLLM's log records no whole-weight load), older snapshots write seeds through the same engine with
pi_b their own, and the adapter checkpoints evaluate with vLLM as with the ``hf`` engine. Skipped where vLLM cannot run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import MICRO_TASK, metrics, micro_args, tsctl
from test_lora_e2e import check_pool_seeds
from test_vllm_cli_real import VLLM, greedy_accuracy_by_engine
from tsctl.io.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from tsctl.runconfig import compose_config

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LORA = ["model.lora.rank=8", "trainer.lr=3e-3"]
CFG = compose_config(["model=micro", "trainer=micro", *MICRO_TASK, "engine.max_new_tokens=24", *LORA]).cfg
POOL = [
    "trainer.batch_size=8", "trainer.n=8", "ratio=50", "refresh=1", "seeds.selector=uniform", "seeds.pool_size=3", "trainer.steps=4",
    "trainer.eval_every=0", "trainer.save_every=2",
]
"""A pool run whose 64 samples a step give some group rewards that differ, so the adapter moves at every step."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory, model_cache) -> tuple[Path, list[str]]:
    runs = tmp_path_factory.mktemp("vllm-lora") / "runs"
    base = micro_args(runs, model_cache)
    tsctl("train", *base, *VLLM, *LORA, *POOL, "name=lora")
    return runs / "default" / "lora", base


def test_every_step_samples_the_synced_adapter_at_the_trainers_log_probs_without_a_whole_weight_load(trained):
    run, _ = trained
    steps = [r for r in metrics(run) if "logprob_gap/abs_max" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4] and all(r["grad_norm"] > 0 for r in steps)  # the adapter moved every step
    assert all(r["logprob_gap/abs_max"] <= 1e-4 for r in steps)  # a stale adapter would sample from other weights
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"
    (log,) = (run.parent.parent / "_logs").glob("vllm-*.log")
    reloads = [line for line in log.read_text().splitlines() if "Failed to load weights" in line and not line.startswith("tsctl shows")]
    assert not reloads  # each whole-weight reload logs one for the rotary table
    checkpoint = run / "checkpoints" / "step-4"
    assert (checkpoint / ADAPTER_CONFIG).is_file() and not (checkpoint / "model.safetensors").exists()


def test_older_snapshots_write_seeds_through_vllm_with_pi_b_their_own(trained):
    run, _ = trained
    snapshots = sorted((run / "seeds" / "pool").glob("step-*"))
    assert [p.name for p in snapshots] == ["step-000001", "step-000002", "step-000003"] and all((p / ADAPTER_WEIGHTS).is_file() for p in snapshots)
    checked = check_pool_seeds(run, CFG, gap=1e-5)  # pi_b is the trainer's forward with the snapshot's adapter
    assert any(step < window for window, step in checked)  # older snapshots wrote seeds, not only the live weights


def test_adapter_checkpoints_evaluate_with_vllm_as_with_the_hf_engine(trained):
    run, base = trained
    accuracy = greedy_accuracy_by_engine(run, base)
    assert sorted(accuracy["engine=hf"]) == sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir())
    assert accuracy["engine=vllm"] == accuracy["engine=hf"]
