"""What every case of the catalogue of bad inputs checks (``tests/test_bad_*.py``).

A refusal: exit code 2, exactly one ``error:`` line that names the problem and the fix, no traceback, and
nothing already on disk changed (every file and folder under the given roots hashed with its mode before
and after). Then the fix the line suggests is applied and shown to work.
"""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

from conftest import tsctl
from tsctl.io.run_lock import LOCK_FILE


def snapshot(*roots: Path) -> dict[str, tuple[int, str | None]]:
    """Every file and folder under ``roots``: its mode and the SHA-256 of its bytes (None for a folder, and for a
    run's lock file, which names the process that last took it: a refused resume takes it before it reads the run)."""
    out = {}
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))] if root.exists() else []:
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and path.name != LOCK_FILE else None
            out[str(path)] = (stat.S_IMODE(path.lstat().st_mode), digest)
    return out


def refused(roots: list[Path], *args: str, words: tuple[str, ...] = (), **env: str) -> str:
    """Run ``tsctl ARGS`` (environment ``env`` added); assert exit 2, one ``error:`` line holding ``words``, no traceback and
    nothing under ``roots`` changed; return the line."""
    before = snapshot(*roots)
    proc = tsctl(*args, check=False, **env)
    output = proc.stdout + proc.stderr
    lines = [line for line in output.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in output, output
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert snapshot(*roots) == before
    return lines[0]


def passes(*args: str, words: tuple[str, ...] = (), **env: str) -> str:
    """Run ``tsctl ARGS`` (a suggested fix applied); assert exit 0, no ``error:`` and ``words`` in its output; return the output."""
    proc = tsctl(*args, check=False, **env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "error:" not in output, output
    for word in words:
        assert word in output, (word, output)
    return output
