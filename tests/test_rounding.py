"""A run's arithmetic (device, CPU instruction set, torch threads): recorded, compared, and resumed as started."""

import pytest
import torch

from tsctl.io import rounding
from tsctl.io.progress import console

CPU = torch.device("cpu")


@pytest.fixture
def threads():
    """Torch's thread count, put back after the test."""
    before = torch.get_num_threads()
    yield before
    torch.set_num_threads(before)


def test_the_current_arithmetic_names_the_device_the_dispatch_and_the_threads(threads):
    torch.set_num_threads(1)
    now = rounding.current(CPU)
    assert now == {"device": "cpu", "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": 1}
    assert sorted(now) == sorted(rounding.KEYS)


def test_between_gpus_only_the_device_is_compared():
    h200 = {"device": "NVIDIA H200", "cpu_capability": "AVX512", "torch_threads": 16}
    assert rounding.changes(h200, h200 | {"cpu_capability": "AVX2", "torch_threads": 8}) == []  # the host's CPU
    assert rounding.changes(h200, h200 | {"device": "NVIDIA A100"}) == ["device NVIDIA H200 -> NVIDIA A100"]
    cpu = {"device": "cpu", "cpu_capability": "AVX512", "torch_threads": 1}
    assert rounding.changes(cpu, h200) == ["device cpu -> NVIDIA H200", "torch_threads 1 -> 16"]


def test_changes_list_each_differing_key_recorded_on_both_sides():
    started = {"device": "cpu", "cpu_capability": "AVX512", "torch_threads": 1}
    assert rounding.changes(started, started) == []
    assert rounding.changes(started, {"device": "cpu", "cpu_capability": "AVX2", "torch_threads": 2}) == [
        "cpu_capability AVX512 -> AVX2", "torch_threads 1 -> 2"]
    assert rounding.changes({"torch_threads": 1}, {"device": "NVIDIA H200", "torch_threads": 1}) == []  # device not recorded


def test_a_label_is_one_short_line():
    assert rounding.label({"device": "cpu", "cpu_capability": "AVX2", "torch_threads": 1}) == "cpu AVX2, 1 thread"
    assert rounding.label({"device": "cpu", "cpu_capability": "AVX512", "torch_threads": 16}) == "cpu AVX512, 16 threads"
    assert rounding.label({"device": "NVIDIA H200", "cpu_capability": "AVX512", "torch_threads": 16}) == "NVIDIA H200"


def test_a_resumed_run_takes_the_threads_it_started_with_and_says_so(threads, capsys):
    torch.set_num_threads(2)
    started = rounding.current(CPU) | {"torch_threads": 1}
    with console.capture() as out:
        left = rounding.resume_as_started(started, CPU)
    assert torch.get_num_threads() == 1 and left == []
    assert "resuming at 1 torch thread(s) as the run started (this process had 2)" in out.get()


def test_what_a_resume_cannot_take_is_a_warning(threads):
    torch.set_num_threads(1)
    started = rounding.current(CPU) | {"cpu_capability": "ANOTHER", "torch_threads": 1}
    with console.capture() as out:
        left = rounding.resume_as_started(started, CPU)
    assert left == [f"cpu_capability ANOTHER -> {torch.backends.cpu.get_cpu_capability()}"]
    assert "warning: this run started with other arithmetic (cpu_capability ANOTHER ->" in " ".join(out.get().split())


def test_a_run_from_before_arithmetic_was_recorded_resumes_as_it_is(threads):
    torch.set_num_threads(2)
    assert rounding.resume_as_started(None, CPU) == [] and rounding.resume_as_started({}, CPU) == []
    assert torch.get_num_threads() == 2


def test_a_final_evaluation_says_what_it_does(threads):
    torch.set_num_threads(2)
    with console.capture() as out:
        rounding.resume_as_started(rounding.current(CPU) | {"torch_threads": 1}, CPU, doing="evaluating")
    assert "evaluating at 1 torch thread(s) as the run started" in out.get()


def test_the_thread_count_is_put_back_after_a_run_that_took_its_own(threads):
    torch.set_num_threads(2)
    with rounding.threads_kept():
        torch.set_num_threads(1)
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), rounding.threads_kept():  # also when the run fails
        torch.set_num_threads(1)
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2


def test_on_a_gpu_the_device_is_named_by_cuda(monkeypatch):
    named: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: named.append(device) or "NVIDIA H200")
    now = rounding.current(torch.device("cuda", 1))
    assert now["device"] == "NVIDIA H200" and named == [torch.device("cuda", 1)]  # the rank's own GPU, not GPU 0
    assert rounding.label(now) == "NVIDIA H200"
