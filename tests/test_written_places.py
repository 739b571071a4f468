"""``tsctl eval`` and ``tsctl report`` write only inside the run or sweep folder they are named, never through a link.

A run may be read wherever it lies when it is named there (a run copied from another machine, an exported sweep), but a
folder named inside the runs folder must resolve inside it, as a run ``train`` writes does; and the folder either
command writes into (``eval/step-N``, ``eval/<model>`` under the runs folder, ``plots``, ``report``) must not be a link
leading out. Each refusal is one line, nothing outside is written, and its fixes (remove the link; name the folder the
link leads to) work.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from catalogue import passes, refused
from conftest import micro_args, tsctl

pytestmark = pytest.mark.slow

OWN = ["ratio=0", "trainer.steps=1", "trainer.eval_every=0", "name=r"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    runs = tmp_path_factory.mktemp("places") / "runs"
    tsctl("train", *micro_args(runs, model_cache), *OWN)
    return runs


@pytest.fixture
def runs(trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the module's runs folder (one run, ``default/r``) as ``runs`` in the working folder (``tsctl report``
    reads the runs folder ``runs`` from there); an empty folder ``elsewhere`` beside it."""
    shutil.copytree(trained, tmp_path / "runs", symlinks=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path / "runs"


def evaluate(runs: Path, model_cache: Path, *extra: str) -> list[str]:
    return ["eval", *micro_args(runs, model_cache), *OWN, "eval.limit=4", *extra]


def test_eval_results_through_a_link_out_of_the_run_are_refused_until_it_is_removed(runs: Path, model_cache: Path) -> None:
    run, outside = runs / "default" / "r", runs.parent / "elsewhere"
    (run / "eval").symlink_to(outside)
    args = evaluate(runs, model_cache, f"eval.checkpoint={run}")
    refused([runs, outside], *args, words=(f"error: {run / 'eval' / 'step-1'} leads to {outside / 'step-1'}, outside {run} (through a link), "
                                           "and would be written there; remove the link",))
    (run / "eval").unlink()
    passes(*args, words=("results of step-1",))
    assert (run / "eval" / "step-1" / "heldout.json").is_file() and list(outside.iterdir()) == []


def test_eval_of_a_model_through_a_link_out_of_the_runs_folder_is_refused_until_it_is_removed(runs: Path, model_cache: Path) -> None:
    model, outside = runs / "default" / "r" / "checkpoints" / "step-1", runs.parent / "elsewhere"
    shutil.copytree(model, runs.parent / "model")  # a model folder that is not a run's checkpoint
    (runs / "default" / "eval").symlink_to(outside)
    args = evaluate(runs, model_cache, f"eval.checkpoint={runs.parent / 'model'}")
    refused([runs, outside], *args, words=(f"error: {runs / 'default' / 'eval' / 'model'} leads to {outside / 'model'}, outside {runs}",
                                           "remove the link"))
    (runs / "default" / "eval").unlink()
    passes(*args, words=("results of model",))
    assert (runs / "default" / "eval" / "model" / "heldout.json").is_file() and list(outside.iterdir()) == []


def test_a_run_named_inside_the_runs_folder_that_leads_out_is_refused_and_read_where_it_lies(runs: Path, model_cache: Path) -> None:
    outside = runs.parent / "elsewhere" / "r"
    (runs / "default" / "r").rename(outside)
    (runs / "default" / "r").symlink_to(outside)
    for command in (evaluate(runs, model_cache, f"eval.checkpoint={runs / 'default' / 'r'}"), ["report", "runs/default/r"]):
        line = refused([runs, outside], *command, words=(f"leads to {outside}, outside the runs folder {runs} (through a link)",
                                                         f"remove the link, or name {outside} itself"))
        named = line.rsplit("or name ", 1)[1].removesuffix(" itself")
        fixed = [a.replace(str(runs / "default" / "r"), named) if a.startswith("eval.checkpoint=") else a for a in command]
        passes(*[named if a == "runs/default/r" else a for a in fixed])
    assert (outside / "eval" / "step-1" / "heldout.json").is_file() and (outside / "plots" / "summary.md").is_file()


def test_a_run_copied_outside_the_runs_folder_is_evaluated_and_reported_where_it_lies(runs: Path, model_cache: Path) -> None:
    copied = runs.parent / "elsewhere" / "r"
    shutil.copytree(runs / "default" / "r", copied)
    passes(*evaluate(runs, model_cache, f"eval.checkpoint={copied}"), words=("results of step-1",))
    passes("report", str(copied), words=(f"report: {copied / 'plots'}",))
    assert (copied / "eval" / "step-1" / "heldout.json").is_file() and (copied / "plots" / "summary.md").is_file()


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_a_report_folder_that_is_a_link_out_is_refused_until_it_is_removed(runs: Path, sweep: bool) -> None:
    folder, outside = (runs / "default") if sweep else (runs / "default" / "r"), runs.parent / "elsewhere"
    written = folder / ("report" if sweep else "plots")
    written.symlink_to(outside)
    refused([runs, outside], "report", str(folder), words=(f"error: {written} leads to {outside}, outside {folder} (through a link)",
                                                            "remove the link"))
    written.unlink()
    passes("report", str(folder), words=(f"report: {written}",))
    assert (written / "summary.md").is_file() and list(outside.iterdir()) == []
