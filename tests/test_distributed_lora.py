"""LoRA (``model.lora``) under ``torchrun --nproc_per_node=2`` (FSDP2 over gloo) against one process.

- the update: metrics and the updated adapter and its AdamW moments of two ranks equal one process's on the same
  batch (within 1e-5); the base weights stay bit-identical on every rank; the optimiser holds the adapter alone;
- the KL reference (the policy with its adapter off) is the base model on the sharded policy;
- the weight sync gives each rank's engine the updated adapter over the unchanged base;
- checkpoints: the ranks write the adapter folder of a one-process run (no base weights) and the adapter's
  optimiser shards, which load in one process; a one-process LoRA checkpoint loads on two ranks;
- a whole two-rank ``tsctl train model.lora.rank=4`` run killed with SIGKILL resumes to the same metrics, and
  ``tsctl eval`` loads its checkpoint in one process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint import FileSystemReader

from conftest import micro_args, stable_metrics, tsctl
from distributed_lora_update import lora_policy, lora_update
from distributed_update import LR, NoTokenizer, full_moments
from test_distributed import assert_tensors_close, torchrun
from tsctl.io.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from tsctl.io.checkpoints import STATE_FILE, load_state, save_checkpoint
from tsctl.io.sharded_checkpoints import load_training_state
from tsctl.models.forward import Forward
from tsctl.models.lora import adapter_off, load_adapter_weights, trainable_parameters

HERE = Path(__file__).resolve().parent
RANKS = (0, 1)


def adapter_of(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor for name, tensor in params.items() if ".lora_" in name}


def base_of(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor for name, tensor in params.items() if ".lora_" not in name}


def adapter_config(folder: Path) -> dict:
    """A folder's ``adapter_config.json``, its target modules (a set, written in any order) sorted."""
    config = json.loads((folder / ADAPTER_CONFIG).read_text())
    return {**config, "target_modules": sorted(config["target_modules"])}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The update in this process at one thread, as each rank runs, and its checkpoint (``checkpoint``)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        means, model, optimizer, _, reference = lora_update()
    finally:
        torch.set_num_threads(threads)
    folder = tmp_path_factory.mktemp("one-process")
    path = save_checkpoint(folder, 1, model, NoTokenizer(), {"optimizer": optimizer.state_dict()})
    return {
        "metrics": means, "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "moments": full_moments(model, optimizer), "reference": reference, "checkpoint": path,
    }


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory, one_process: dict) -> Path:
    out = tmp_path_factory.mktemp("two-ranks")
    torchrun(str(HERE / "distributed_lora_update.py"), str(out), str(one_process["checkpoint"]))
    return out


def test_two_ranks_update_the_adapter_as_one_process_and_leave_the_base_bit_identical(two_ranks, one_process):
    want = one_process
    initial = dict(lora_policy()[0].state_dict())
    moved = max((want["params"][n] - p).abs().max().item() for n, p in adapter_of(initial).items())
    assert moved > 2 * LR  # three AdamW steps: the comparison below is not of an untouched adapter
    assert want["metrics"]["grad_norm"] > 0.1 and want["metrics"]["kl_ref/max"] > 0
    for rank in RANKS:
        got = torch.load(two_ranks / f"rank{rank}.pt")
        assert sorted(got["metrics"]) == sorted(want["metrics"])
        for name, value in want["metrics"].items():
            assert got["metrics"][name] == pytest.approx(value, abs=1e-5), name
        assert_tensors_close(adapter_of(got["params"]), adapter_of(want["params"]))
        assert_tensors_close(got["moments"], want["moments"])
        assert sorted(base_of(got["params"])) == sorted(base_of(initial))
        for name, tensor in base_of(initial).items():
            assert torch.equal(got["params"][name], tensor), name
        assert got["trainable"] == sorted(adapter_of(initial)) and all("lora_" in k.split("/")[0] for k in got["moments"])
        assert got["optimised"] == sum(t.numel() for t in adapter_of(initial).values()) // 2  # each rank: its shards of the adapter alone


def test_the_kl_reference_of_the_sharded_policy_is_the_base_model(two_ranks, one_process):
    model, batch, *_ = lora_policy()
    policy = Forward(1.0).recompute(model, batch, entropy=False)[0]
    with adapter_off(model):
        without = Forward(1.0).recompute(model, batch, entropy=False)[0]
    assert (policy - without).abs().max() > 1e-3  # the adapter changes the log-probs: the reference must drop it
    mask = batch.resp_mask.bool()  # each rank's rows come back padded to the batch's width: compare response tokens
    for rank in RANKS:
        got = torch.load(two_ranks / f"rank{rank}.pt")["reference"]
        torch.testing.assert_close(got[mask], without[mask], atol=1e-6, rtol=0)
        torch.testing.assert_close(got[mask], one_process["reference"][mask], atol=1e-6, rtol=0)


def test_each_ranks_engine_gets_the_updated_adapter_over_the_unchanged_base(two_ranks, one_process):
    for rank in RANKS:
        got = torch.load(two_ranks / f"rank{rank}.pt")["engine"]
        assert_tensors_close(adapter_of(got), adapter_of(one_process["params"]))
        for name, tensor in base_of(one_process["params"]).items():
            assert torch.equal(got[name], tensor), name


def test_the_ranks_write_the_adapter_folder_of_one_process_and_its_optimiser_shards(two_ranks, one_process):
    path = two_ranks / "ckpt" / "step-1"
    assert {ADAPTER_CONFIG, ADAPTER_WEIGHTS, "dcp", STATE_FILE} <= {p.name for p in path.iterdir()}
    assert not (path / "config.json").exists() and not (path / "model.safetensors").exists()
    single = one_process["checkpoint"]
    assert adapter_config(path) == adapter_config(single)
    got, want = load_file(str(path / ADAPTER_WEIGHTS)), load_file(str(single / ADAPTER_WEIGHTS))
    assert {t.dtype for t in got.values()} == {torch.float32}
    assert_tensors_close(got, want)
    saved = FileSystemReader(str(path / "dcp")).read_metadata().state_dict_metadata
    model_keys = {key.removeprefix("model.") for key in saved if key.startswith("model.")}
    assert model_keys == set(adapter_of(one_process["params"]))  # the adapter, never the base weights
    assert all(".lora_" in key for key in saved if key.startswith("optim.state."))

    state = load_state(path)
    assert state["world_size"] == 2 and "optimizer" not in state
    model = lora_policy()[0]
    load_adapter_weights(model, path)
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=LR)
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    load_training_state(path, state, model, optimizer)
    two = torch.load(two_ranks / "rank0.pt")
    assert_tensors_close(dict(model.state_dict()), {**base_of(one_process["params"]), **adapter_of(two["params"])})
    assert_tensors_close(full_moments(model, optimizer), two["moments"])


def test_a_one_process_lora_checkpoint_loads_on_two_ranks(two_ranks, one_process):
    got = torch.load(two_ranks / "loaded-from-one.pt")
    model = lora_policy()[0]
    load_adapter_weights(model, one_process["checkpoint"])
    assert_tensors_close(got["adapter"], adapter_of(one_process["params"]))
    assert sorted(got["adapter"]) == sorted(name for name, p in model.named_parameters() if p.requires_grad)
    assert_tensors_close(got["moments"], one_process["moments"])


# ---- whole runs ----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_two_rank_lora_run_killed_resumes_to_the_same_metrics_and_its_checkpoint_evaluates(tmp_path_factory, model_cache):
    runs_dir = tmp_path_factory.mktemp("runs")
    args = [*micro_args(runs_dir, model_cache), "model.lora.rank=4", "algo.kl_coef=0.01", "trainer.steps=3"]
    tsctl("warmup", *micro_args(tmp_path_factory.mktemp("warm"), model_cache))  # built once, before the ranks race for it
    runs = runs_dir / "default"
    torchrun("-m", "tsctl", "train", *args, "name=whole")
    killed = torchrun("-m", "tsctl", "train", *args, "name=killed", env={"TSCTL_KILL_AT": "step-logged:2"}, check=False)
    assert killed.returncode != 0
    assert [r["step"] for r in stable_metrics(runs / "killed")] == [0, 1, 2]
    torchrun("-m", "tsctl", "train", *args, "name=killed", "resume=true")
    whole = stable_metrics(runs / "whole")
    assert [r["step"] for r in whole] == [0, 1, 2, 3] and stable_metrics(runs / "killed") == whole
    assert whole[1]["kl_ref"] == 0 and whole[3]["kl_ref"] > 0  # the reference (adapter off) is the new policy, not the trained one

    last = runs / "whole" / "checkpoints" / "step-3"
    assert (last / ADAPTER_CONFIG).is_file() and not (last / "model.safetensors").exists()
    tsctl("eval", *micro_args(runs_dir, model_cache), f"eval.checkpoint={runs / 'whole'}", "eval.limit=4")
    scored = json.loads((runs / "whole" / "eval" / "step-3" / "heldout.json").read_text())
    assert scored["step"] == 3 and scored["problems"] == 4
