"""Each segment of a run (its start and every resume) records its world size; a resume on another one says so in one line."""

import json

import pytest

from conftest import kill, tsctl
from tsctl.io.world_segments import segments, with_segment, world_change


def test_each_segment_is_recorded_and_a_change_of_world_size_is_named():
    first = with_segment({}, 0, 2)
    assert first == {"world_size": 2, "segments": [{"started_step": 0, "world_size": 2}]}
    assert world_change(first, 3, 2) is None
    note = world_change(first, 3, 1)
    assert note is not None and "\n" not in note
    assert "2 process(es)" in note and "resumes on 1" in note and "from step 3 on" in note and "--nproc_per_node=2" in note
    assert with_segment(first, 3, 1)["segments"] == [{"started_step": 0, "world_size": 2}, {"started_step": 3, "world_size": 1}]


def test_a_manifest_without_segments_has_one_from_its_start():
    assert segments({"started_step": 0, "world_size": 2}) == [{"started_step": 0, "world_size": 2}]
    assert segments({"started_step": 2}) == [{"started_step": 2, "world_size": 1}]
    assert world_change({"started_step": 0}, 2, 1) is None and world_change({}, 0, 1) is None


@pytest.mark.slow
def test_a_resume_on_another_world_size_warns_and_records_it(micro, tmp_path):
    args = [*micro, "trainer.steps=3", "trainer.save_every=1", "trainer.eval_every=0", "name=r"]
    kill(args, ("step-logged", 2))
    manifest_file = tmp_path / "runs" / "default" / "r" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    assert manifest["segments"] == [{"started_step": 0, "world_size": 1}]
    manifest_file.write_text(json.dumps({**manifest, "world_size": 2, "segments": [{"started_step": 0, "world_size": 2}]}))  # as torchrun started it
    proc = tsctl("train", *args, "resume=true")
    notes = [line for line in proc.stderr.splitlines() if "resumes on 1" in line]
    assert len(notes) == 1 and "last trained on 2 process(es)" in notes[0]
    manifest = json.loads(manifest_file.read_text())
    assert manifest["status"] == "completed" and manifest["world_size"] == 1
    assert [s["world_size"] for s in manifest["segments"]] == [2, 1] and manifest["segments"][1]["started_step"] > 0
