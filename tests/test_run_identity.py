"""A run folder is trusted only while its config, manifest and records agree, and only inside the runs folder.

Each case as a user meets it: a run whose config.yaml was deleted or edited by hand, a damaged or lost manifest, a
folder at the run's place that is not a run, a link out of the runs folder. Each refusal is one ``error:`` line,
exit code 2, and nothing on disk changes; where the line suggests a fix, the fix is applied and works. One micro run
is trained for the module and copied into each test that needs it.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from catalogue import snapshot
from conftest import micro_args
from tsctl.cli import app
from tsctl.io.run_identity import CONFIG_DIGEST, config_digest, config_values

runner = CliRunner()

OWN = ["ratio=25", "trainer.steps=2", "trainer.save_every=1", "trainer.eval_every=0", "name=r"]
"""The shared run: ratio 25 (seed shards), two steps, a checkpoint after each."""


@dataclass
class Run:
    """A copy of the module's completed micro run: the runs folder, the run folder, and the command's overrides."""

    runs: Path
    path: Path
    args: list[str]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    runs = tmp_path_factory.mktemp("identity") / "runs"
    result = runner.invoke(app, ["train", *micro_args(runs, model_cache), *OWN])
    assert result.exit_code == 0, result.output
    return runs


@pytest.fixture
def run(trained: Path, tmp_path: Path, model_cache: Path) -> Run:
    runs = tmp_path / "runs"
    shutil.copytree(trained, runs, symlinks=True)
    return Run(runs, runs / "default" / "r", [*micro_args(runs, model_cache), *OWN])


def refused(roots: list[Path], args: list[str], *words: str) -> str:
    """Run ``tsctl ARGS`` in process; assert exit 2, one ``error:`` line holding ``words``, and nothing under ``roots`` changed."""
    before = snapshot(*roots)
    result = runner.invoke(app, args)
    lines = result.output.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert snapshot(*roots) == before
    return lines[0]


def passes(args: list[str]) -> str:
    """Run ``tsctl ARGS`` in process; assert exit 0 and no error; its output."""
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "error:" not in result.output, result.output
    return result.output


@pytest.mark.slow
def test_a_run_whose_config_was_deleted_is_refused_then_resumes_once_written_back(run: Run) -> None:
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest[CONFIG_DIGEST] == config_digest(config_values((run.path / "config.yaml").read_text()))
    (run.path / "config.yaml").unlink()
    # Once, this trained a ratio-0 run over the ratio-25 run's metrics and checkpoints and said "run complete".
    other = [*run.args, "ratio=0", "trainer.steps=3"]
    line = refused([run.runs], ["train", *other], "config.yaml is missing", "manifest.json, metrics.jsonl are there", "--cfg job")
    assert refused([run.runs], ["train", *other, "resume=true"]) == line  # not "no run to resume"
    refused([run.runs], ["train", *run.args, "resume=true"], "config.yaml is missing")
    # The fix the line gives: the config written back from the run's own overrides, checked against the digest.
    (run.path / "config.yaml").write_text(passes(["train", *run.args, "--cfg", "job"]))
    assert "run complete" in passes(["train", *run.args, "resume=true"])


@pytest.mark.slow
def test_a_config_edited_by_hand_does_not_let_a_resume_carry_on_under_it(run: Run) -> None:
    config = run.path / "config.yaml"
    config.write_text(config.read_text().replace("steps: 2\n", "steps: 3\n", 1))
    refused([run.runs], ["train", *run.args, "trainer.steps=3", "resume=true"], "config.yaml is not the config the run started with",
            CONFIG_DIGEST, "undo the edit")
    refused([run.runs], ["report", str(run.path)], "config.yaml is not the config the run started with")


@pytest.mark.slow
@pytest.mark.parametrize(("damage", "words"), [
    (lambda run: (run / "manifest.json").write_text('{"status": "comp'), "manifest.json is damaged"),
    (lambda run: (run / "manifest.json").write_text("[]"), "manifest.json is damaged (not a JSON object)"),
    (lambda run: (run / "config.yaml").write_text("ratio: [25\n"), "config.yaml is damaged"),
    (lambda run: (run / "manifest.json").unlink(), "manifest.json is missing, though config.yaml and metrics.jsonl are there"),
    (lambda run: (run / "config.yaml").unlink(), "config.yaml is missing"),
], ids=["manifest-cut", "manifest-list", "config-cut", "manifest-lost", "config-lost"])
def test_train_eval_report_and_ablate_refuse_a_damaged_run(run: Run, damage, words: str) -> None:
    damage(run.path)
    refused([run.runs], ["train", *run.args, "resume=true"], words)
    refused([run.runs], ["train", *run.args], words)
    refused([run.runs], ["eval", *run.args, f"eval.checkpoint={run.path}"], words)
    refused([run.runs], ["eval", *run.args, f"eval.checkpoint={run.path / 'checkpoints' / 'step-2'}"], words)
    refused([run.runs], ["report", str(run.path)], words)
    refused([run.runs], ["report", str(run.path.parent)], words)  # as one run of a sweep folder
    sweep = run.runs / "default" / "sweep"
    sweep.mkdir()
    (run.path).rename(sweep / "seed=0")
    point = sweep / "seed=0"
    refused([point], ["ablate", *run.args[:-1], "seed=0,1", "name=sweep"], words, f"sweep {sweep}")


@pytest.mark.slow
def test_a_run_from_before_the_digest_still_resumes(run: Run) -> None:
    manifest = json.loads((run.path / "manifest.json").read_text())
    del manifest[CONFIG_DIGEST]
    (run.path / "manifest.json").write_text(json.dumps(manifest))
    assert "run complete" in passes(["train", *run.args, "resume=true"])


@pytest.mark.slow
def test_a_run_resumes_through_a_runs_folder_that_is_a_link(run: Run, tmp_path: Path, model_cache: Path) -> None:
    link = tmp_path / "linked-runs"
    link.symlink_to(run.runs)
    assert "run complete" in passes(["train", *micro_args(link, model_cache), *OWN, "resume=true"])


def test_a_folder_that_is_not_a_run_is_never_adopted(micro: list[str], tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "default" / "notes"
    folder.mkdir(parents=True)
    (folder / "todo.txt").write_text("mine\n")
    for resume in ("false", "true"):
        refused([tmp_path / "runs"], ["train", *micro, "name=notes", f"resume={resume}"],
                f"{folder} exists and is not a run folder (it holds todo.txt, and no config.yaml)", "choose another name=")


def test_a_folder_with_checkpoints_but_no_config_is_not_trained_over(micro: list[str], tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "default" / "bare"
    (folder / "checkpoints" / "step-2").mkdir(parents=True)
    refused([tmp_path / "runs"], ["train", *micro, "name=bare"], "config.yaml is missing, though checkpoints is there",
            "move the folder aside and train the run anew")


def test_a_link_out_of_the_runs_folder_receives_nothing(micro: list[str], tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "runs" / "default").mkdir(parents=True)
    (tmp_path / "runs" / "default" / "planted").symlink_to(outside)
    (tmp_path / "runs" / "default" / "gone").symlink_to(tmp_path / "runs" / "missing")
    roots = [tmp_path / "runs", outside]
    refused(roots, ["train", *micro, "name=planted"], f"leads to {outside}, outside the runs folder", "remove the link")
    refused(roots, ["train", *micro, "name=planted", "resume=true"], "outside the runs folder")
    refused(roots, ["train", *micro, "name=gone"], "which does not exist", "remove the link")
    (tmp_path / "runs" / "linked").symlink_to(outside)
    refused(roots, ["ablate", *micro, "seed=0,1", "experiment=linked"], "outside the runs folder")
    assert list(outside.iterdir()) == []
