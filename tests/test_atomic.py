"""Writes that follow the umask, full-disk and read-only failures as one line, the run lock, the kill seam."""

import errno
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from tsctl.io import atomic
from tsctl.io.checkpoints import STATE_FILE
from tsctl.io.run_lock import RunBusy, RunLock, clean_temp, is_held
from tsctl.analysis.points import run_status


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_files_and_staged_folders_follow_the_umask(tmp_path, umask_027):
    atomic.write_text(tmp_path / "a.json", "{}")
    with atomic.staged_dir(tmp_path / "ckpt") as tmp:
        (tmp / "inner").mkdir()
        (tmp / "inner" / "w.bin").write_bytes(b"1")
        (tmp / "private.bin").write_bytes(b"2")
        (tmp / "private.bin").chmod(0o600)  # as safetensors writes its files
    assert mode(tmp_path / "a.json") == 0o640  # tempfile alone: 0600
    assert mode(tmp_path / "ckpt") == 0o750  # mkdtemp alone: 0700
    assert mode(tmp_path / "ckpt" / "inner") == 0o750
    assert mode(tmp_path / "ckpt" / "private.bin") == 0o640
    assert atomic.umask() == 0o027


@pytest.mark.parametrize(
    "err, code",
    [
        (OSError(errno.ENOSPC, "No space left on device"), errno.ENOSPC),
        (SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"), errno.ENOSPC),
        (PermissionError(errno.EACCES, "Permission denied"), errno.EACCES),
        (OSError(errno.EROFS, "Read-only file system"), errno.EROFS),
        (FileNotFoundError(errno.ENOENT, "No such file"), None),
        (RuntimeError("unexpected pos 704 vs 598"), None),
    ],
)
def test_write_problem_reads_errno_and_library_messages(err, code):
    assert atomic.write_problem(err) == code


def test_a_full_disk_in_a_chained_error_is_found():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598") from inner
    except RuntimeError as outer:
        assert atomic.write_problem(outer) == errno.ENOSPC


def test_a_checkpoint_that_meets_a_full_disk_leaves_the_old_one_and_no_temp_folder(tmp_path):
    final = tmp_path / "step-2"
    final.mkdir()
    (final / "old.bin").write_bytes(b"old")
    with pytest.raises(atomic.WriteError, match=r"no space left on .*step-2 .*resume=true"):
        with atomic.staged_dir(final), open("/dev/full", "wb") as full:
            torch.save({"x": torch.zeros(1000)}, full)  # the real kernel error of a full device
    assert (final / "old.bin").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["step-2"]


def test_write_error_is_one_line_naming_path_and_fix():
    full = atomic.write_error(errno.ENOSPC, "/data/runs/x/metrics.jsonl")
    denied = atomic.write_error(errno.EROFS, "/data/runs")
    assert str(full).startswith("no space left on /data/runs/x/metrics.jsonl") and "\n" not in str(full)
    assert str(denied) == "cannot write /data/runs: read-only file system; make it writable (chmod u+w) or point runs_dir=... elsewhere"
    assert full.errno == errno.ENOSPC


def test_the_run_lock_refuses_a_second_holder_and_tells_live_from_dead(tmp_path):
    assert is_held(tmp_path) is False
    lock = RunLock.acquire(tmp_path)
    assert lock.held and is_held(tmp_path) is True
    assert (tmp_path / ".lock").read_text() == f"pid {os.getpid()} on {socket.gethostname()}\n"
    with pytest.raises(RunBusy, match=f"pid {os.getpid()}"):
        RunLock.acquire(tmp_path, tries=2)
    assert run_status(tmp_path, {"status": "running"}) == "running"
    lock.release()
    assert is_held(tmp_path) is False
    assert run_status(tmp_path, {"status": "running"}) == "interrupted"
    assert run_status(tmp_path, {"status": "completed"}) == "completed"


def test_clean_temp_removes_what_killed_writers_left_but_not_eval_or_real_files(tmp_path):
    leftovers = [
        tmp_path / ".manifest.json.abc.tmp",
        tmp_path / "checkpoints" / ".step-4.x1y2.tmp" / "model.safetensors",
        tmp_path / "seeds" / ".step-000002.parquet.q9.tmp",
        tmp_path / "rollouts" / ".step-000003.parquet.z.tmp",
    ]
    kept = [tmp_path / "checkpoints" / "step-2" / STATE_FILE, tmp_path / "seeds" / "step-000002.parquet", tmp_path / "eval" / "step-2" / ".heldout.json.k.tmp"]
    for path in leftovers + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    removed = clean_temp(tmp_path)
    assert len(removed) == 4
    assert not any(p.exists() for p in leftovers) and not (tmp_path / "checkpoints" / ".step-4.x1y2.tmp").exists()
    assert all(p.exists() for p in kept)


def test_kill_seam_sigkills_at_the_named_hit_only():
    code = "from tsctl.io import faults\nfor i in range(3):\n    faults.hit('b'); faults.hit('a'); print(i, flush=True)"
    env = {**os.environ, "TSCTL_KILL_AT": "a:2"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL and proc.stdout == "0\n"
    env["TSCTL_KILL_AT"] = "c:1"
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == "0\n1\n2\n"
    env["TSCTL_KILL_AT"] = "a"
    assert "expected <point>:<n>" in subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stderr
