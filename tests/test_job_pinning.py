"""Points of a parallel sweep (joblib): each on its own GPU and a fixed share of the cores; one at a time, untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from conftest import micro_args, tsctl
from tsctl.distributed import job_pinning
from tsctl.distributed.job_pinning import claim_gpu, parallel_jobs, pin_job, threads_per_job, visible_gpus


@pytest.fixture
def worker(monkeypatch, process_state_put_back) -> list[int]:
    """A fresh worker: no GPU claimed yet; torch's thread count recorded instead of set (the device it pins, for the
    rest of its process, put back after)."""
    monkeypatch.setattr(job_pinning, "_held", [])
    monkeypatch.delenv(job_pinning.PINNED_ENV, raising=False)
    monkeypatch.delenv(job_pinning.THREADS_ENV, raising=False)
    threads: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    return threads


def test_jobs_at_once_follow_joblibs_n_jobs_and_never_exceed_the_points(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert parallel_jobs({"n_jobs": 2}, points=3) == 2
    assert parallel_jobs({"n_jobs": 4}, points=3) == 3
    assert parallel_jobs({"n_jobs": -1}, points=20) == 8  # joblib: -1 is one per core, -2 all but one
    assert parallel_jobs({"n_jobs": -2}, points=20) == 7
    assert parallel_jobs({}, points=5) == 1  # the basic launcher: one after another


def test_threads_are_the_cores_shared_out_unless_set():
    assert threads_per_job(2, env={}, cores=2) == 1
    assert threads_per_job(3, env={}, cores=16) == 5
    assert threads_per_job(4, env={}, cores=2) == 1
    assert threads_per_job(2, env={"TSCTL_THREADS_PER_JOB": "3"}, cores=2) == 3
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match="TSCTL_THREADS_PER_JOB"):
            threads_per_job(2, env={"TSCTL_THREADS_PER_JOB": bad}, cores=2)


def test_visible_gpus_come_from_cuda_visible_devices_first():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_each_worker_claims_a_different_gpu_and_extra_workers_share(tmp_path, worker):
    assert claim_gpu(tmp_path, ["4", "7"]) == ("4", False)
    assert claim_gpu(tmp_path, ["4", "7"]) == ("7", False)  # slot 0's lock is held: the next worker gets slot 1
    gpu, shared = claim_gpu(tmp_path, ["4", "7"])  # a third worker: round-robin, unlocked
    assert gpu in {"4", "7"} and shared
    for handle in job_pinning._held:
        handle.close()  # the worker ends: its slot is free again
    assert claim_gpu(tmp_path, ["4", "7"]) == ("4", False)


def test_a_pinned_worker_sees_one_gpu_and_keeps_it_for_its_later_points(tmp_path, monkeypatch, worker):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    pinning = pin_job(2, tmp_path)
    assert (pinning.gpu, pinning.shares, pinning.threads) == ("5", False, 8) and os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    again = pin_job(2, tmp_path)  # the worker's next point
    assert again.gpu == "5" and os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    assert worker == [8, 8]


def test_a_point_s_threads_are_the_cores_over_the_jobs_whatever_else_runs(tmp_path, monkeypatch, worker):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert pin_job(2, tmp_path).threads == 4
    assert pin_job(3, tmp_path).threads == 2
    monkeypatch.setenv(job_pinning.THREADS_ENV, "3")
    assert pin_job(2, tmp_path).threads == 3
    assert worker == [4, 2, 3]


def test_one_job_at_a_time_pins_nothing(tmp_path, monkeypatch, worker):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    assert pin_job(1, tmp_path) is None
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5,6" and worker == [] and not (tmp_path / job_pinning.SLOTS_DIR).exists()


@pytest.mark.slow
def test_a_joblib_sweep_runs_its_points_in_pinned_workers(tmp_path: Path, model_cache: Path):
    done = tsctl("ablate", "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "trainer.steps=1", "name=par", *micro_args(tmp_path, model_cache),
                 process=True)  # its workers print to the command's own output, and joblib sets the environment for good
    output = done.stdout + done.stderr
    assert output.count("CPU thread(s)") == 2, output
    for point in ("seed=0", "seed=1"):
        assert (tmp_path / "default" / "par" / point / "final_eval.json").is_file()
        manifest = json.loads((tmp_path / "default" / "par" / point / "manifest.json").read_text())
        assert manifest["arithmetic"]["torch_threads"] == threads_per_job(2)
        records = [json.loads(line) for line in (tmp_path / "default" / "par" / point / "metrics.jsonl").read_text().splitlines()]
        assert {r["torch_threads"] for r in records if r["step"] >= 1} == {threads_per_job(2)}  # every step
