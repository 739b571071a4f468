"""Shared fixtures: micro-sized overrides so end-to-end runs take seconds."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("TSCTL_NO_PROGRESS", "1")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def micro(tmp_path: Path) -> list[str]:
    """Overrides for a seconds-long run of any command in ``tmp_path``."""
    return [
        f"runs_dir={tmp_path / 'runs'}",
        "model=micro",
        "trainer=micro",
        "task.train_size=400",
        "task.heldout_size=40",
        "engine.max_new_tokens=24",
    ]
