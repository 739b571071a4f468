"""Data parallel over FSDP2 (``torchrun --nproc_per_node=2``, gloo on CPU) against one process.

- the update: loss, gradient norm, every clip/KL/entropy metric and the updated parameters and AdamW
  moments of two ranks equal one process's on the same global batch (within 1e-5), ratio 0 and 25;
- checkpoints: one written by two ranks loads in one process, one written by one process loads on two;
- a whole two-rank run killed with SIGKILL resumes to the same metrics, and its checkpoint resumes in one process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import micro_args, stable_metrics, tsctl
from distributed_update import CASES, LR, full_moments, update
from test_update import tiny_model
from tsctl.io.checkpoints import STATE_FILE, load_state
from tsctl.io.sharded_checkpoints import load_training_state

HERE = Path(__file__).resolve().parent


def torchrun(*args: str, ranks: int = 2, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=ranks ARGS``, one thread per rank."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", *args]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, timeout=300)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


@pytest.fixture(scope="module")
def one_process() -> dict[str, dict]:
    """Each case's update in this process, at one thread as each rank runs: metric means, parameters, AdamW moments."""
    out, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for case, ratio in CASES.items():
            means, model, optimizer, _ = update(ratio)
            out[case] = {"metrics": means, "params": dict(model.state_dict()), "moments": full_moments(model, optimizer), "optimizer": optimizer}
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory, one_process: dict) -> Path:
    """The same updates on two ranks (``tests/distributed_update.py``), which also load ratio=25's one-process state."""
    out = tmp_path_factory.mktemp("two-ranks")
    single = out / "one-process-ckpt"
    single.mkdir()
    torch.save(one_process["ratio=25"]["params"], single / "weights.pt")
    torch.save({"optimizer": one_process["ratio=25"]["optimizer"].state_dict()}, single / STATE_FILE)
    torchrun(str(HERE / "distributed_update.py"), str(out), str(single))
    return out


def assert_tensors_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=0, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_update_as_one_process_on_the_same_global_batch(two_ranks, one_process, case):
    got, want = torch.load(two_ranks / f"{case}.pt"), one_process[case]
    metrics = want["metrics"]
    assert sorted(got["metrics"]) == sorted(metrics)
    assert metrics["grad_norm"] > 0.1 and metrics["kl_ref/max"] > 0  # gradients and every loss term at work
    if case == "ratio=25":
        assert metrics["importance_ratio_by_source/prefix"] > 0 and metrics["clipped_by_source/prefix"] >= 0
    for name, value in metrics.items():
        assert got["metrics"][name] == pytest.approx(value, abs=1e-5), name
    moved = max((want["params"][n] - p).abs().max().item() for n, p in tiny_model().state_dict().items())
    assert moved > 3 * LR  # six AdamW steps: the comparison below is not of untouched weights
    assert_tensors_close(got["params"], dict(want["params"]))
    assert_tensors_close(got["moments"], want["moments"])


def test_each_rank_samples_with_the_whole_updated_weights(two_ranks, one_process):
    got = torch.load(two_ranks / "ratio=0.pt")
    assert_tensors_close(got["inference"], dict(one_process["ratio=0"]["params"]))


@pytest.mark.parametrize("case", list(CASES))
def test_a_checkpoint_written_by_two_ranks_loads_in_one_process(two_ranks, case):
    got = torch.load(two_ranks / f"{case}.pt")
    path = two_ranks / f"{case}-ckpt" / "step-1"
    assert {"dcp", "rng-rank0.pt", "rng-rank1.pt", STATE_FILE, "config.json", "model.safetensors"} <= {p.name for p in path.iterdir()}
    state = load_state(path)
    assert state["world_size"] == 2 and "optimizer" not in state
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    load_training_state(path, state, model, optimizer)
    assert_tensors_close(dict(model.state_dict()), got["params"])
    assert_tensors_close(full_moments(model, optimizer), got["moments"])


def test_a_one_process_checkpoint_loads_on_two_ranks(two_ranks, one_process):
    got, want = torch.load(two_ranks / "loaded-from-one.pt"), one_process["ratio=25"]
    assert_tensors_close(got["params"], dict(want["params"]))
    assert_tensors_close(got["moments"], want["moments"])


# ---- whole runs ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_args(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> list[str]:
    tsctl("warmup", *micro_args(tmp_path_factory.mktemp("warm"), model_cache))  # built once, before the ranks race for it
    return ["-m", "tsctl", "train", *micro_args(tmp_path_factory.mktemp("runs"), model_cache), "ratio=25", "trainer.steps=4"]


@pytest.mark.slow
def test_a_two_rank_run_killed_resumes_to_the_same_metrics_and_on_one_process(run_args):
    runs = Path(next(a for a in run_args if a.startswith("runs_dir=")).split("=", 1)[1]) / "default"
    torchrun(*run_args, "name=whole")
    killed = torchrun(*run_args, "name=killed", env={"TSCTL_KILL_AT": "step-logged:3"}, check=False)
    assert killed.returncode != 0
    assert [r["step"] for r in stable_metrics(runs / "killed")] == [0, 1, 2, 3]
    assert json.loads((runs / "killed" / "manifest.json").read_text())["world_size"] == 2

    shutil.copytree(runs / "killed", runs / "to-one")  # the same killed run, resumed in one process below
    torchrun(*run_args, "name=killed", "resume=true")
    assert stable_metrics(runs / "killed") == stable_metrics(runs / "whole")

    # one process resumes from the two ranks' step-2 checkpoint (its DCP shards resharded to one)
    subprocess.run([sys.executable, *run_args, "name=to-one", "resume=true"], check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    to_one, whole = stable_metrics(runs / "to-one"), stable_metrics(runs / "whole")
    assert [r["step"] for r in to_one] == [0, 1, 2, 3, 4]
    assert to_one[:3] == whole[:3]  # kept as written by the two ranks
    manifest = json.loads((runs / "to-one" / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["started_step"] == 2


@pytest.mark.parametrize("clean", [True, False])
def test_leaving_the_process_group_waits_for_the_other_ranks_only_on_a_clean_exit(monkeypatch, clean):
    from tsctl.distributed import world as ranks

    calls: list[str] = []
    monkeypatch.setattr(ranks, "_current", ranks.World(rank=0, size=2, local_rank=0))  # a rank of a torchrun job
    monkeypatch.setattr(ranks.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(ranks.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(ranks.dist, "destroy_process_group", lambda: calls.append("destroy"))
    ranks.stop(clean=clean)
    assert calls == (["barrier", "destroy"] if clean else ["destroy"])
    assert ranks.current() is ranks.SINGLE


@pytest.mark.parametrize("fails", [False, True])
def test_train_leaves_the_process_group_cleanly_only_when_it_did_not_fail(monkeypatch, fails):
    from types import SimpleNamespace

    from tsctl.stages import train as train_stage

    left: list[bool] = []

    def body(composed, world):
        if fails:
            raise RuntimeError("rank failed")
        return "run"

    monkeypatch.setattr(train_stage, "_train", body)
    monkeypatch.setattr(train_stage.ranks, "stop", lambda clean=True: left.append(clean))
    composed = SimpleNamespace(cfg=SimpleNamespace(model=SimpleNamespace(dtype="float32", device="cpu")))
    if fails:
        with pytest.raises(RuntimeError, match="rank failed"):
            train_stage.train(composed)
    else:
        assert train_stage.train(composed) == "run"
    assert left == [not fails]
