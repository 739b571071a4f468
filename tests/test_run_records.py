"""``tsctl.io.run_records``: a finished run's small files kept apart from its checkpoints, and restored."""

import gzip
import json
from pathlib import Path

import pytest

from tsctl.io.run_records import is_record, restore_record, save_record
from tsctl.io.runs import RunDir, RunError
from tsctl.stages.ablate import is_done
from tsctl.analysis.points import find_runs


def finished_run(folder: Path) -> Path:
    """A completed run folder with a checkpoint that no record keeps."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("- ratio=25\n- seed=1\n")
    (folder / "config.yaml").write_text("ratio: 25\nseed: 1\n")
    (folder / "manifest.json").write_text(json.dumps({"status": "completed", "git_revision": "abc1234"}))
    (folder / "final_eval.json").write_text(json.dumps({"greedy_accuracy": 0.4}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "entropy": 0.5 - 0.01 * s}) + "\n" for s in range(30)))
    (folder / "checkpoints" / "step_30").mkdir(parents=True)
    (folder / "checkpoints" / "step_30" / "model.safetensors").write_bytes(b"\0" * 1000)
    return folder


def test_a_record_restores_the_run_as_a_finished_run_without_its_checkpoints(tmp_path):
    run = finished_run(tmp_path / "run")
    save_record(run, tmp_path / "record")
    assert is_record(tmp_path / "record")
    assert sorted(str(p.relative_to(tmp_path / "record")) for p in (tmp_path / "record").rglob("*") if p.is_file()) == [
        ".hydra/overrides.yaml", "config.yaml", "final_eval.json", "manifest.json", "metrics.jsonl.gz"]
    assert gzip.decompress((tmp_path / "record" / "metrics.jsonl.gz").read_bytes()) == (run / "metrics.jsonl").read_bytes()

    restore_record(tmp_path / "record", tmp_path / "again")
    for name in ("config.yaml", "manifest.json", "final_eval.json", "metrics.jsonl", ".hydra/overrides.yaml"):
        assert (tmp_path / "again" / name).read_bytes() == (run / name).read_bytes(), name
    assert not (tmp_path / "again" / "checkpoints").exists()
    assert is_done(RunDir(tmp_path / "again"))  # tsctl ablate skips the point
    restored = find_runs(tmp_path / "again")[0]
    assert (restored.status, restored.revision, len(restored.records)) == ("completed", "abc1234", 30)


def test_the_same_run_gives_the_same_record_bytes(tmp_path):
    run = finished_run(tmp_path / "run")
    save_record(run, tmp_path / "first")
    save_record(run, tmp_path / "second")
    first = (tmp_path / "first" / "metrics.jsonl.gz").read_bytes()
    assert first == (tmp_path / "second" / "metrics.jsonl.gz").read_bytes()
    assert first[4:8] == b"\0\0\0\0"  # the gzip header's time stamp: none, so a record saved tomorrow is the same file


def test_a_damaged_record_names_itself_and_the_fix_and_writes_nothing(tmp_path):
    save_record(finished_run(tmp_path / "run"), tmp_path / "record")
    gz = tmp_path / "record" / "metrics.jsonl.gz"
    gz.write_bytes(gz.read_bytes()[:20])
    with pytest.raises(RunError, match=r"metrics.jsonl.gz is damaged .*delete .*record and train that point again"):
        restore_record(tmp_path / "record", tmp_path / "again")
    assert not (tmp_path / "again").exists()
    with pytest.raises(RunError, match="is not a run record"):
        restore_record(tmp_path / "run", tmp_path / "again")
    with pytest.raises(RunError, match="is not a run folder"):
        save_record(tmp_path / "record", tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record", "run"]  # no staged folder left behind


def test_tsctl_report_reads_a_folder_of_records_as_it_reads_the_runs(tmp_path):
    from tsctl.analysis.report import report

    for ratio in (0, 25):
        for seed in range(2):
            run = finished_run(tmp_path / "sweep" / f"ratio={ratio}-seed={seed}")
            (run / ".hydra" / "overrides.yaml").write_text(f"- ratio={ratio}\n- seed={seed}\n")
            (run / "config.yaml").write_text(f"ratio: {ratio}\nseed: {seed}\n")
            (run / "final_eval.json").write_text(json.dumps({"greedy_accuracy": 0.4 + 0.01 * seed + 0.001 * ratio}))
            entropy = [0.5 - 0.01 * s * (1 + seed) + 0.001 * ratio for s in range(1, 11)]
            steps = (json.dumps({"step": s, "entropy": e, "entropy_by_source/plain": e}) + "\n" for s, e in enumerate(entropy, 1))
            (run / "metrics.jsonl").write_text("".join(steps))
            save_record(run, tmp_path / "records" / run.name)
    from_runs = (report(tmp_path / "sweep", echo=False) / "summary.csv").read_text()
    from_records = (report(tmp_path / "records", echo=False) / "summary.csv").read_text()
    assert from_records == from_runs
    # the last step's entropy (the last 10% of 10 steps): 0.4 and 0.3 by seed at ratio 0, 0.025 more at ratio 25
    assert "ratio=0,0,2,2,2,0.405," in from_runs and ",0.35,0.0707107," in from_runs and ",0.375,0.0707107," in from_runs
    assert len(RunDir(tmp_path / "records" / "ratio=0-seed=1").read_metrics()) == 10


def test_damaged_metrics_of_a_record_stop_the_report_with_the_fix(tmp_path):
    save_record(finished_run(tmp_path / "run"), tmp_path / "record")
    (tmp_path / "record" / "metrics.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(RunError, match=r"record/metrics.jsonl.gz is damaged .*delete .*record and train that point again"):
        RunDir(tmp_path / "record").read_metrics()
