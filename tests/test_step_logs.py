"""Step logs with a damaged line: the reader skips it, a rewrite sets it aside, a resume retrains its step."""

import json
from pathlib import Path

from tsctl.io.checkpoints import STATE_FILE
from tsctl.io.resume_plan import plan_resume
from tsctl.io.runs import RunDir
from tsctl.io.step_logs import keep_through, read_step_log
from tsctl.seeds.arm_log import ArmLog

DAMAGED = b'{"entropy": 0.4\xff\x00\x00, "step'
"""A line as a damaged disk block leaves it: not UTF-8, not JSON."""


def write_log(path: Path, steps: range, damaged_step: int) -> None:
    """A log of one record per step, the line of ``damaged_step`` replaced by :data:`DAMAGED`."""
    lines = [DAMAGED if s == damaged_step else json.dumps({"entropy": s / 10, "step": s}, sort_keys=True).encode() for s in steps]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def add_checkpoints(run: Path, *steps: int) -> None:
    for step in steps:
        folder = run / "checkpoints" / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / STATE_FILE).write_bytes(b"")


def test_the_records_after_a_damaged_middle_line_are_read(tmp_path):
    write_log(tmp_path / "metrics.jsonl", range(7), damaged_step=2)
    assert [r["step"] for r in RunDir(tmp_path).read_metrics()] == [0, 1, 3, 4, 5, 6]
    log = read_step_log(tmp_path / "metrics.jsonl")
    assert log.damaged == [DAMAGED] and log.missing(0, 6) == [2]


def test_a_rewrite_sets_damaged_lines_aside_in_the_next_free_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_log(path, range(7), damaged_step=2)
    assert keep_through(read_step_log(path), 4) == tmp_path / "metrics.jsonl.damaged-1"
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 3, 4]
    assert (tmp_path / "metrics.jsonl.damaged-1").read_bytes() == DAMAGED + b"\n"
    with open(path, "ab") as f:
        f.write(b'{"step": 5, "entro')  # a kill mid-write
    assert keep_through(read_step_log(path), 4) == tmp_path / "metrics.jsonl.damaged-2"
    assert (tmp_path / "metrics.jsonl.damaged-2").read_bytes() == b'{"step": 5, "entro\n'
    assert (tmp_path / "metrics.jsonl.damaged-1").read_bytes() == DAMAGED + b"\n"
    assert keep_through(read_step_log(path), 4) is None


def test_the_arm_log_keeps_the_lines_after_a_damaged_one(tmp_path):
    log = ArmLog(tmp_path / "arms.jsonl")
    for step in (1, 2, 3):
        log.append(step, {0: (0.5 * step, step)})
    lines = log.path.read_bytes().splitlines()
    log.path.write_bytes(b"\n".join([lines[0], DAMAGED, lines[2]]) + b"\n")
    assert log.totals() == {0: (4, 2.0)}
    log.truncate(3)
    assert [r["step"] for r in log.records()] == [1, 3]
    assert (tmp_path / "arms.jsonl.damaged-1").read_bytes() == DAMAGED + b"\n"


def test_a_resume_retrains_a_damaged_step_from_the_checkpoint_before_it(tmp_path):
    write_log(tmp_path / "metrics.jsonl", range(9), damaged_step=5)
    add_checkpoints(tmp_path, 2, 4, 6, 8)
    plan = plan_resume(tmp_path, eval_at_start=True)
    assert plan.start == (4, tmp_path / "checkpoints" / "step-4") and plan.retrained == [5] and plan.lost == []
    assert plan.apply() == (
        "metrics.jsonl: 5 record(s) kept, 1 damaged line(s) set aside in metrics.jsonl.damaged-1; "
        "step(s) 5 missing, retrained from checkpoint step-4 (newer checkpoints step-6, step-8 removed, written again)"
    )
    assert [r["step"] for r in RunDir(tmp_path).read_metrics()] == [0, 1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-2", "step-4"]


def test_a_resume_names_a_damaged_step_no_checkpoint_can_retrain(tmp_path):
    write_log(tmp_path / "metrics.jsonl", range(9), damaged_step=2)
    add_checkpoints(tmp_path, 6, 8)
    plan = plan_resume(tmp_path, eval_at_start=True)
    assert plan.start == (8, tmp_path / "checkpoints" / "step-8") and plan.retrained == [] and plan.lost == [2]
    assert plan.apply() == (
        "metrics.jsonl: 8 record(s) kept, 1 damaged line(s) set aside in metrics.jsonl.damaged-1; "
        "step(s) 2 missing and not recomputable (no checkpoint before them is left): their records stay missing; "
        "train anew under another name=... to have them"
    )
    assert [r["step"] for r in RunDir(tmp_path).read_metrics()] == [0, 1, 3, 4, 5, 6, 7, 8]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-6", "step-8"]


def test_a_damaged_arm_log_line_moves_the_resume_back_too(tmp_path):
    write_log(tmp_path / "metrics.jsonl", range(7), damaged_step=-1)
    write_log(tmp_path / "seeds" / "pool" / "arms.jsonl", range(1, 7), damaged_step=4)
    add_checkpoints(tmp_path, 3, 6)
    plan = plan_resume(tmp_path, eval_at_start=True)
    assert plan.start[0] == 3 and plan.retrained == [4]
    assert plan.apply() == (
        "metrics.jsonl: 4 record(s) kept; arms.jsonl: 3 record(s) kept, 1 damaged line(s) set aside in arms.jsonl.damaged-1; "
        "step(s) 4 missing, retrained from checkpoint step-3 (newer checkpoints step-6 removed, written again)"
    )


def test_a_resume_without_checkpoints_retrains_everything(tmp_path):
    write_log(tmp_path / "metrics.jsonl", range(3), damaged_step=1)
    plan = plan_resume(tmp_path, eval_at_start=True)
    assert plan.start is None
    assert plan.apply() == "metrics.jsonl: 0 record(s) kept, 1 damaged line(s) set aside in metrics.jsonl.damaged-1"
    assert (tmp_path / "metrics.jsonl").read_bytes() == b""
