"""A damaged line in the middle of ``metrics.jsonl``, then ``resume=true``: no intact record is lost.

The damaged step is retrained from the checkpoint before it, so the resumed run's metrics equal the
uninterrupted run's (``time/*`` and rates aside); where no checkpoint before it is left, its record
stays missing and the resume's one line says so. Either way the damaged line is set aside.
"""

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import stable_metrics, tsctl
from tsctl.cli import app

SETTINGS = ["trainer.steps=4", "trainer.save_every=1", "trainer.keep_checkpoints=0"]
"""Checkpoints at every step, all kept; records of steps 0..4 (step 0: the held-out evaluation at the start)."""

DAMAGED = b'{"entropy": 0.4\xff\x00\x00, "step'


def damage_line(run: Path, index: int) -> bytes:
    """Replace line ``index`` of the run's ``metrics.jsonl`` with :data:`DAMAGED`; the line it was."""
    lines = (run / "metrics.jsonl").read_bytes().splitlines()
    before, lines[index] = lines[index], DAMAGED
    (run / "metrics.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    return before


@pytest.mark.slow
def test_a_damaged_middle_line_is_set_aside_and_its_step_retrained(micro):
    args = [*micro, *SETTINGS, "name=damaged"]
    tsctl("train", *args)
    run = Path(micro[0].split("=", 1)[1]) / "default" / "damaged"
    reference = stable_metrics(run)
    assert [r["step"] for r in reference] == [0, 1, 2, 3, 4]
    kept_aside = shutil.copytree(run, run.with_name("no-checkpoint-before"))
    damage_line(run, 2)
    result = CliRunner().invoke(app, ["train", *args, "resume=true"])
    assert result.exit_code == 0, result.output
    assert (
        "resume: metrics.jsonl: 2 record(s) kept, 1 damaged line(s) set aside in metrics.jsonl.damaged-1; "
        "step(s) 2 missing, retrained from checkpoint step-1 (newer checkpoints step-2, step-3, step-4 removed, written again)"
    ) in result.output.splitlines()
    assert stable_metrics(run) == reference
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1", "step-2", "step-3", "step-4"]
    assert (run / "metrics.jsonl.damaged-1").read_bytes() == DAMAGED + b"\n"

    for step in (1, 2, 3):  # no checkpoint before step 2 is left
        shutil.rmtree(kept_aside / "checkpoints" / f"step-{step}")
    damage_line(kept_aside, 2)
    result = CliRunner().invoke(app, ["train", *args[:-1], f"name={kept_aside.name}", "resume=true"])
    assert result.exit_code == 0, result.output
    assert (
        "resume: metrics.jsonl: 4 record(s) kept, 1 damaged line(s) set aside in metrics.jsonl.damaged-1; "
        "step(s) 2 missing and not recomputable (no checkpoint before them is left): their records stay missing; "
        "train anew under another name=... to have them"
    ) in result.output.splitlines()
    assert stable_metrics(kept_aside) == [r for r in reference if r["step"] != 2]
    assert (kept_aside / "metrics.jsonl.damaged-1").read_bytes() == DAMAGED + b"\n"
