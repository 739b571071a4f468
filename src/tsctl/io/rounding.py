"""What decides a run's floating-point rounding besides its config: the device, the CPU instruction set
torch dispatches its kernels to, and torch's CPU threads.

A matmul splits its sums among threads and vector lanes, so two thread counts round differently, and RL
amplifies the last bits: the countdown run ``ratio=25 seed=0`` at one and at two threads differs in the
11th digit of its entropy at step 1, in its sampled answers from step 19, and by step 60 its batch
accuracies are several points apart. So a run records these when it starts (``manifest.json``:
``arithmetic``; each step's record has ``torch_threads``), a resumed run takes the thread count it
started with, and warns about what it cannot take (another device or instruction set); ``tsctl report``
warns when a sweep's runs differ in them. On a GPU only the device is compared: the CPU's part is small.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Optional

import torch

from tsctl.io.progress import console

KEYS = ("device", "cpu_capability", "torch_threads")
"""The entries of a manifest's ``arithmetic``."""


def current(device: torch.device) -> dict[str, Any]:
    """This process's arithmetic when it computes on ``device``: ``device`` (``cpu`` or the GPU's name),
    ``cpu_capability`` (torch's kernel dispatch: ``AVX512``, ``AVX2``, ``DEFAULT``, ...) and ``torch_threads``."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"device": name, "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads()}


def _compared(started: Mapping[str, Any], now: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys that matter: all of :data:`KEYS` when either side computed on the CPU, only ``device`` between GPUs."""
    return KEYS if "cpu" in (started.get("device", "cpu"), now.get("device", "cpu")) else ("device",)


def changes(started: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``key old -> new`` for each compared key (:func:`_compared`) recorded in both and different; empty if none."""
    return [f"{key} {started[key]} -> {now[key]}" for key in _compared(started, now) if key in started and key in now and started[key] != now[key]]


def label(arithmetic: Mapping[str, Any]) -> str:
    """One line for a report: ``cpu AVX512, 2 threads``, or the GPU's name alone."""
    if arithmetic.get("device", "cpu") != "cpu":
        return str(arithmetic["device"])
    threads = arithmetic.get("torch_threads")
    return f"cpu {arithmetic.get('cpu_capability', '?')}, {threads} thread{'s' if threads != 1 else ''}"


def resume_as_started(started: Optional[Mapping[str, Any]], device: torch.device, doing: str = "resuming") -> list[str]:
    """Before a resumed run (or its final evaluation: ``doing``) computes anything: take the torch threads it
    started with (``started``, its manifest's ``arithmetic``; None for a run from before it was recorded:
    nothing done), and say so; the differences it cannot undo (device, instruction set), which it warns about."""
    if not started:
        return []
    threads = started.get("torch_threads")
    if isinstance(threads, int) and threads != torch.get_num_threads():
        console.print(f"{doing} at {threads} torch thread(s) as the run started (this process had "
                      f"{torch.get_num_threads()}): another count rounds differently and the run would drift", highlight=False)
        torch.set_num_threads(threads)
    left = changes(started, current(device))
    if left:
        console.print(f"[yellow]warning:[/yellow] this run started with other arithmetic ({', '.join(left)}): from the "
                      "checkpoint on it rounds differently and will drift from the run it would have been; resume it on "
                      "the kind of machine it started on for the same result", highlight=False)
    return left


@contextlib.contextmanager
def threads_kept() -> Iterator[None]:
    """Put torch's thread count back on exit: a run that took its own (:func:`resume_as_started`) leaves the
    next run of the same process (a sequential sweep's next point) at the process's count."""
    before = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
