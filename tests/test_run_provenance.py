"""A run's manifest names the code that ran it: the git revision and whether tracked files had uncommitted changes."""

import subprocess
from pathlib import Path

import pytest

from tsctl.io.runs import git_revision

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "tsctl"


def git(*args: str) -> str:
    """``git args`` in the package's folder; the test is skipped outside a git checkout."""
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=PACKAGE, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")


def test_the_revision_and_dirty_flag_are_this_checkout_s():
    found = git_revision()
    assert found["git_revision"] == git("rev-parse", "HEAD").strip()
    assert found["git_dirty"] is bool(git("status", "--porcelain", "--untracked-files=no").strip())


def test_outside_a_git_checkout_neither_is_known(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert git_revision() == {"git_revision": None, "git_dirty": None}
