"""Shared fixtures: micro-sized overrides so end-to-end runs take seconds."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

os.environ.setdefault("TSCTL_NO_PROGRESS", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # one worker per core (pyproject's addopts): one torch thread each, in the worker and the commands it starts, since
    # two processes with a thread per core each wait on each other's OpenMP threads (set before torch is imported)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import process_state  # noqa: E402 - imports torch, which reads OMP_NUM_THREADS

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CHECKOUT_RUNS = Path(__file__).resolve().parents[1] / "runs"
"""The checkout's own runs folder, where the README's main job writes: no test reads or writes it."""
_CHECKOUT_KEY = pytest.StashKey[dict]()

MICRO_TASK = [
    "task=arithmetic",
    "task.arithmetic.max_digits=1",
    "task.arithmetic.min_terms=2",
    "task.arithmetic.max_terms=3",
    "task.train_size=2000",
    "task.heldout_size=100",
]
"""A task the micro model learns in seconds (about 20% held-out greedy accuracy), so rewards vary."""


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One built-in model cache for the whole session, shared by its pytest-xdist workers (their temporary folders
    have one parent): each micro model is warmed up once, by the first command that needs it, while the cache's lock
    keeps the other workers waiting for it."""
    base = tmp_path_factory.getbasetemp()
    cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "model-cache"
    cache.mkdir(exist_ok=True)
    return cache


def micro_args(runs_dir: Path, model_cache: Path) -> list[str]:
    """Overrides for a seconds-long run of any command writing into ``runs_dir``."""
    return [
        f"runs_dir={runs_dir}",
        f"model.cache_dir={model_cache}",
        "model=micro",
        "trainer=micro",
        *MICRO_TASK,
        "engine.max_new_tokens=24",
    ]


@pytest.fixture
def micro(tmp_path: Path, model_cache: Path) -> list[str]:
    """Overrides for a seconds-long run of any command in ``tmp_path``."""
    return micro_args(tmp_path / "runs", model_cache)


_RUNNING = {"slow": False, "vllm": False}
"""Whether the test being set up or run is marked ``slow``, and ``vllm``."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _RUNNING["slow"] = item.get_closest_marker("slow") is not None
    _RUNNING["vllm"] = item.get_closest_marker("vllm") is not None


@pytest.fixture(autouse=True)
def gives_back_process_state(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test leaves the process as it found it (:mod:`process_state`): what it changed is put back, and the test
    fails naming it. The real-vLLM tests are exempt: an engine built in the process binds its threads for good, which
    is why they run last (and in a pytest process of their own in ``.ci/run``)."""
    before = process_state.snapshot()
    yield
    if request.node.get_closest_marker("vllm") is not None:
        return
    leaked = process_state.differences(before, process_state.snapshot())
    process_state.restore(before)
    if leaked:
        pytest.fail(f"the test left process-wide state changed (now put back): {'; '.join(leaked)}", pytrace=False)


@pytest.fixture
def process_state_put_back() -> Iterator[None]:
    """For a test of code that changes process-wide state on purpose, for the rest of its process (a vLLM engine's
    logging and environment, a sweep worker's pinned device): everything :mod:`process_state` reads, put back after."""
    logging.getLogger("vllm")  # a logger first made during a test is not compared: the engine's is made before
    before = process_state.snapshot()
    yield
    process_state.restore(before)


def tsctl(*args: str, check: bool = True, process: bool = False, **env_vars: str) -> subprocess.CompletedProcess:
    """Run ``tsctl ARGS`` and return its exit code and output; unless ``check`` is off, fail with its output when it
    exits non-zero. It runs in this process (Typer's test runner: no interpreter to start, no imports to pay) unless
    ``process`` is set, ``env_vars`` are given or the test runs real vLLM: a command that is killed or signalled, pins
    threads, reads its environment when torch is imported or builds a vLLM engine (which binds the process's threads
    for good) runs as ``python -m tsctl`` with ``env_vars`` added to the environment. Output
    is wide either way (a one-line message stays one line), and an exception a user should never see appears as its
    traceback in ``stderr``, as a process would print it. Only a ``slow`` test may run the command line."""
    if not _RUNNING["slow"]:
        raise AssertionError("this test runs the command line end to end: mark it @pytest.mark.slow")
    if process or env_vars or _RUNNING["vllm"]:
        proc = start_tsctl(*args, **env_vars)
        stdout, stderr = proc.communicate()
        done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    else:
        done = _in_process(list(args))
    if check and done.returncode != 0:
        raise AssertionError(f"tsctl {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def _in_process(args: list[str]) -> subprocess.CompletedProcess:
    """``tsctl ARGS`` through Typer's test runner in this process, its console as wide as :func:`start_tsctl`'s."""
    import traceback

    from typer.testing import CliRunner

    from tsctl.cli import app
    from tsctl.io.progress import console

    width, console.width = console._width, 1000  # noqa: SLF001 - rich keeps no public way to unset a width
    try:
        result = CliRunner().invoke(app, args, prog_name="tsctl")
    finally:
        console._width = width  # noqa: SLF001
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["tsctl", *args], result.exit_code, result.stdout, stderr)


def state(proc: subprocess.Popen) -> str:
    """The process's state letter from ``/proc`` (``T``: stopped)."""
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_paused(proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until ``proc`` is stopped at its pause point; fail with its output if it ends first."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and state(proc) != "T":
        assert time.monotonic() < deadline, "the command never reached its pause point"
        time.sleep(0.1)
    if proc.returncode is not None:
        out, err = proc.communicate()
        pytest.fail(f"ended ({proc.returncode}) before its pause point:\n{out}\n{err[-3000:]}")


def start_tsctl(*args: str, **env_vars: str) -> subprocess.Popen:
    """Start ``python -m tsctl ARGS`` in the background (text pipes for its output, wide, ``env_vars`` added)."""
    if not _RUNNING["slow"]:
        raise AssertionError("this test runs the command line end to end: mark it @pytest.mark.slow")
    env = {**os.environ, "TSCTL_NO_PROGRESS": "1", "COLUMNS": "1000", **env_vars}
    return subprocess.Popen([sys.executable, "-m", "tsctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def reference_run(runs: Path, model_cache: Path, settings: list[str], process: bool = False) -> tuple[Path, list[str]]:
    """An uninterrupted micro run ``reference`` under ``runs`` with ``settings`` (in a process of its own with
    ``process``): its folder, and the overrides that place more runs beside it (to kill, signal or resume and compare
    against it)."""
    args = [*micro_args(runs, model_cache), *settings]
    tsctl("train", *args, "name=reference", process=process)
    return runs / "default" / "reference", args


VOLATILE = ("time/", "tokens_per_s", "eval/seconds")
"""Metric keys that differ between two runs of the same computation (wall times and rates)."""


def metrics(run: Path) -> list[dict]:
    """The run folder ``run``'s metric records (``metrics.jsonl``), one per logged step."""
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def stable_metrics(run: Path) -> list[dict]:
    """The run folder ``run``'s metric records without their :data:`VOLATILE` keys."""
    return [{k: v for k, v in r.items() if not any(v_ in k for v_ in VOLATILE)} for r in metrics(run)]


def kill(args: list[str], point: tuple[str, int], command: str = "train", **env_vars: str) -> None:
    """Run ``tsctl COMMAND ARGS`` (with the environment variables ``env_vars``) until the kill seam
    (:mod:`tsctl.io.faults`) SIGKILLs it at ``point``, the ``n``-th passage of a named point."""
    from tsctl.io.faults import ENV

    env = {**os.environ, "TSCTL_NO_PROGRESS": "1", ENV: f"{point[0]}:{point[1]}", **env_vars}
    proc = subprocess.run([sys.executable, "-m", "tsctl", command, *args], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, f"not killed at {point}:\n{proc.stderr[-3000:]}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that run real vLLM go last, and are skipped where vLLM cannot run: an engine built in the
    test process binds its threads to cores and seeds the global generators for the rest of the session. Under
    pytest-xdist (``--dist loadgroup``, pyproject's addopts) they are one group, handed out last, and every other
    test file is a group of its own, so that its module fixtures (a micro run several tests read) run once."""
    from tsctl.engines import vllm_platform

    usable = vllm_platform.importable() and (vllm_platform.on_cuda() or vllm_platform.cpu_build())
    skip = pytest.mark.skip(reason=f"vLLM is not installed or finds no device: {vllm_platform.CPU_INSTALL} on the CPU")
    real = [item for item in items if item.get_closest_marker("vllm") is not None]
    if not usable:
        for item in real:
            item.add_marker(skip)
    items[:] = [item for item in items if item.get_closest_marker("vllm") is None] + real
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            item.add_marker(pytest.mark.xdist_group("real-vllm" if item.get_closest_marker("vllm") else item.path.name))


def tree_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` (relative path -> size, modification time in ns); empty when there is none."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_CHECKOUT_KEY] = tree_state(CHECKOUT_RUNS)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when a test wrote into the checkout's ``runs/`` (the user's runs and model cache)."""
    before, after = session.config.stash.get(_CHECKOUT_KEY, {}), tree_state(CHECKOUT_RUNS)
    changed = sorted(set(before) ^ set(after) | {p for p in set(before) & set(after) if before[p] != after[p]})
    if changed:
        print(f"\nerror: the tests changed the checkout's {CHECKOUT_RUNS}: {', '.join(changed[:10])}"
              f"{' ...' if len(changed) > 10 else ''}; a test must write under its own tmp_path", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
