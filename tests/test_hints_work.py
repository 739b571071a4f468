"""Every hint, applied, works: each refusal that suggests a command or an override, met as a user meets it.

Each case runs the failing command (conftest's ``tsctl``, in process), reads the hint from its one ``error:`` line on
stderr, applies it as written (runs the command it names, adds the override it names, takes the step it names: the
file moved aside, the link removed, the config written back from ``--cfg job``'s stdout) and checks that the command
then succeeds (exit code 0) with the file or output it should give. A hint that stopped working, or one whose wording
changed, fails here.

The cases here:

- a run folder's identity (:mod:`tsctl.io.run_identity`): a damaged or lost ``manifest.json``, a damaged
  ``config.yaml``, a lost ``config.yaml`` beside a run's records only ("put it back", "move the folder aside and train
  the run anew", "choose another name=..."); a ``config.yaml`` edited by hand ("write it back: `tsctl train <the run's
  overrides> --cfg job > config.yaml`", "train the new config as a new run under another name=..."); a folder that is
  not a run ("choose another name=...", "move those files away"); a link out of the runs folder and a link to nothing
  ("remove the link");
- ``tsctl rollout`` over a seed shard written for another count ("rerun `tsctl seed` with this command's overrides and
  shards.overwrite=true"; with ``ratio=0``, "pass the ratio it was written for (...)"), over a shard whose rows do not
  fit ("write it again with `tsctl seed`, this command's overrides and shards.overwrite=true");
- ``tsctl seed`` with ``ratio=0`` ("use e.g. ratio=25") and with a seed source of ``train``'s ("drop it here");
- a resumed run whose seed shard holds another prompt's row ("delete the shard to regenerate it");
- ``tsctl report`` with an override it does not read ("drop them");
- a data file whose suffix tells no format ("name it .jsonl"), and a benchmark's ("or set format: jsonl ...");
- ``tsctl eval`` of a path that does not exist ("pass a run folder ... or a model folder");
- Ctrl-C while a run starts ("rerun the same command").

Applied elsewhere, with the same shape: the config refusals that suggest a setting (``test_config_fixes.py``,
``test_config_refusals.py``), bad inputs of a run (``test_bad_inputs.py``: an existing run, a changed config on
resume, a resume of nothing, a run in use, a damaged or crafted checkpoint, a full disk, a read-only place, existing
eval results and shards, a damaged seed shard, overlong prompts, a non-finite stop, ``model.device=cuda``, a run
without checkpoints or of another task), data (``test_bad_data.py``), starts (``test_bad_starts.py``), sweeps
(``test_bad_sweeps.py``, ``test_concurrent_commands.py``), a lost config written back (``test_run_identity.py``), the
damaged model cache and a second eval (``test_unclear_words.py``), another shard's count fixed by ratio and n
(``test_shard_contents.py``), a resume on changed data (``test_resume_data.py``), links out of a folder eval or report
writes (``test_written_places.py``).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import micro_args, tsctl
from tsctl.io.shards import checksum_path, read_shard, write_shard

pytestmark = pytest.mark.slow

OWN = ["ratio=25", "trainer.steps=2", "trainer.save_every=1", "trainer.eval_every=0", "name=r"]
"""The shared run: ratio 25 (1 of trainer.n=4 seeded, one seed shard for both steps), a checkpoint after each step."""

SHORT = ["trainer.steps=1", "trainer.eval_every=0"]
"""A new run trained where a hint says to: one step, no held-out evaluation."""


@dataclass
class Run:
    """A copy of the module's completed micro run: the runs folder, the run folder, the command's overrides."""

    runs: Path
    path: Path
    args: list[str]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Path:
    runs = tmp_path_factory.mktemp("hints") / "runs"
    tsctl("train", *micro_args(runs, model_cache), *OWN)
    return runs


@pytest.fixture
def run(trained: Path, tmp_path: Path, model_cache: Path) -> Run:
    runs = tmp_path / "runs"
    shutil.copytree(trained, runs, symlinks=True)
    return Run(runs, runs / "default" / "r", [*micro_args(runs, model_cache), *OWN])


def refusal(*args: str) -> str:
    """``tsctl ARGS`` refused: exit code 2, one ``error:`` line on stderr, no traceback; that line."""
    done = tsctl(*args, check=False)
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def hint(line: str, pattern: str) -> re.Match:
    """The hint ``pattern`` (a regular expression) found in the error ``line``."""
    found = re.search(pattern, line)
    assert found is not None, (pattern, line)
    return found


def succeeds(*args: str, words: str = "") -> str:
    """``tsctl ARGS`` exits 0 with ``words`` in its stderr; that stderr."""
    done = tsctl(*args)
    assert words in done.stderr, done.stderr
    return done.stderr


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def with_name(args: list[str], name: str) -> list[str]:
    """``args`` with ``name=`` set to ``name``."""
    return [a for a in args if not a.startswith("name=")] + [f"name={name}"]


# A run folder's identity.


def _cut_manifest(run: Path) -> None:
    (run / "manifest.json").write_text('{"status": "comp')


def _cut_config(run: Path) -> None:
    (run / "config.yaml").write_text("ratio: [25\n")


def _lose_manifest(run: Path) -> None:
    (run / "manifest.json").unlink()


DAMAGES = {"manifest-cut": _cut_manifest, "config-cut": _cut_config, "manifest-lost": _lose_manifest}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_run_put_back_resumes_and_moved_aside_trains_anew(run: Run, damage: str) -> None:
    kept = {name: (run.path / name).read_bytes() for name in ("manifest.json", "config.yaml")}
    DAMAGES[damage](run.path)
    line = refusal("train", *run.args, "resume=true")
    hint(line, r"; put it back as the run wrote it, or move the folder aside and train the run anew$")
    for name, data in kept.items():  # put back as the run wrote it
        (run.path / name).write_bytes(data)
    succeeds("train", *run.args, "resume=true", words="run complete")
    DAMAGES[damage](run.path)
    run.path.rename(run.path.with_name("r.aside"))  # moved aside, then the same command trains the run anew
    succeeds("train", *run.args, words="run complete")
    anew = manifest(run.path)
    assert anew["status"] == "completed" and anew["config_sha256"] == json.loads(kept["manifest.json"])["config_sha256"]
    assert (run.path.with_name("r.aside") / "checkpoints" / "step-2").is_dir()


def test_records_without_their_config_moved_aside_or_a_new_name(run: Run) -> None:
    (run.path / "config.yaml").unlink()
    (run.path / "manifest.json").unlink()
    line = refusal("train", *run.args)
    hint(line, r"config\.yaml is missing, though .*metrics\.jsonl.* there, .*; move the folder aside and train the run anew, or choose "
               r"another name=\.\.\.$")
    succeeds("train", *with_name(run.args, "r2"), words="run complete")
    run.path.rename(run.path.with_name("r.aside"))
    succeeds("train", *run.args, words="run complete")


def test_a_config_edited_by_hand_written_back_from_cfg_job_resumes_or_trains_as_a_new_run(run: Run) -> None:
    config = run.path / "config.yaml"
    config.write_text(config.read_text().replace("steps: 2\n", "steps: 3\n", 1))
    edited = [*run.args, "trainer.steps=3"]
    line = refusal("train", *edited, "resume=true")
    written = Path(hint(line, r"write it back: `tsctl train <the run's overrides> --cfg job > (\S+)`\)").group(1))
    new = hint(line, r"or train the new config as a new run under another name=\.\.\.$")
    assert written == config and new
    config.write_text(tsctl("train", *run.args, "--cfg", "job").stdout)  # the run's overrides, as the shell's > writes stdout
    succeeds("train", *run.args, "resume=true", words="run complete")
    succeeds("train", *with_name(edited, "r3"), words="run complete")
    assert manifest(run.runs / "default" / "r3")["finished_step"] == 3


def test_a_folder_that_is_not_a_run_another_name_or_its_files_moved_away(micro: list[str], tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "default" / "notes"
    folder.mkdir(parents=True)
    (folder / "todo.txt").write_text("mine\n")
    line = refusal("train", *micro, *SHORT, "name=notes")
    hint(line, r"; choose another name=\.\.\. \(or experiment=\.\.\.\), or move those files away$")
    succeeds("train", *micro, *SHORT, "name=other", words="run complete")
    succeeds("train", *micro, *SHORT, "name=notes", "experiment=elsewhere", words="run complete")
    (folder / "todo.txt").rename(tmp_path / "todo.txt")
    succeeds("train", *micro, *SHORT, "name=notes", words="run complete")
    assert manifest(folder)["status"] == "completed"


@pytest.mark.parametrize("to", ["outside", "nothing"])
def test_a_run_folder_that_is_a_link_removed_trains(micro: list[str], tmp_path: Path, to: str) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    link = tmp_path / "runs" / "default" / "planted"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside if to == "outside" else tmp_path / "missing")
    line = refusal("train", *micro, *SHORT, "name=planted")
    hint(line, r"; remove the link, or choose another name=\.\.\.")
    succeeds("train", *micro, *SHORT, "name=other", words="run complete")
    link.unlink()
    succeeds("train", *micro, *SHORT, "name=planted", words="run complete")
    assert not link.is_symlink() and manifest(link)["status"] == "completed" and list(outside.iterdir()) == []


# Shards.


def seeded_per_group(shards: Path) -> list[int]:
    """How many samples of each group of ``shards``' rollout shard continue a seed."""
    rolled = read_shard(shards / "rollouts.parquet", "rollout").table.to_pydict()
    groups: dict[int, int] = {}
    for group, step in zip(rolled["group"], rolled["behaviour_step"]):
        groups[group] = groups.get(group, 0) + (step >= 0)
    return list(groups.values())


def test_rollout_for_another_count_after_tsctl_seed_as_the_hint_says(run: Run, tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    place = [*run.args, f"shards.checkpoint={run.path}", f"shards.out_dir={shards}"]
    tsctl("seed", *place)  # ratio=25: 1 of trainer.n=4
    rollout = [*place, "ratio=50"]
    line = refusal("rollout", *rollout)
    hint(line, r"rerun `tsctl seed` with this command's overrides and shards\.overwrite=true")
    tsctl("seed", *rollout, "shards.overwrite=true")
    succeeds("rollout", *rollout)
    assert seeded_per_group(shards) == [2, 2, 2, 2]
    line = refusal("rollout", *place, "ratio=0", "shards.overwrite=true")
    written_for = hint(line, r"; pass the ratio it was written for \((ratio=\S+) (trainer\.n=\S+)\)$").groups()
    succeeds("rollout", *place, "ratio=0", "shards.overwrite=true", *written_for)
    assert written_for == ("ratio=50", "trainer.n=4") and seeded_per_group(shards) == [2, 2, 2, 2]


def test_rollout_of_a_seed_row_that_does_not_fit_after_tsctl_seed_as_the_hint_says(run: Run, tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    place = [*run.args, f"shards.checkpoint={run.path}", f"shards.out_dir={shards}"]
    tsctl("seed", *place)
    shard = read_shard(shards / "seeds.parquet", "seed")
    cols = shard.table.to_pydict()
    cols["cut"][1] = 999  # past its response, written again with a fresh checksum
    write_shard(shards / "seeds.parquet", "seed", cols, shard.metadata, overwrite=True)
    line = refusal("rollout", *place)
    hint(line, r"row 1, cut: 999 is outside .*; write it again with `tsctl seed`, this command's overrides and shards\.overwrite=true$")
    tsctl("seed", *place, "shards.overwrite=true")
    succeeds("rollout", *place)
    assert seeded_per_group(shards) == [1, 1, 1, 1]


def test_seed_with_ratio_0_then_with_the_ratio_it_names(run: Run, tmp_path: Path) -> None:
    place = [*run.args, f"shards.checkpoint={run.path}", f"shards.out_dir={tmp_path / 'shards'}"]
    named = hint(refusal("seed", *place, "ratio=0"), r"ratio=0 seeds no sample; use e\.g\. (ratio=\S+)$").group(1)
    succeeds("seed", *place, "ratio=0", named, words="wrote 4 prompts x 1 seeds")


@pytest.mark.parametrize("entry", [["seeds.source=model", "seeds.source_path={model}"], ["seeds.selector=uniform", "seeds.pool_size=4"]],
                         ids=["source", "selector"])
def test_seed_with_a_setting_of_train_s_dropped_with_what_only_it_reads(run: Run, tmp_path: Path, entry: list[str]) -> None:
    place = [*run.args, f"shards.checkpoint={run.path}", f"shards.out_dir={tmp_path / 'shards'}"]
    bad = [e.format(model=run.path / "checkpoints" / "step-1") for e in entry]
    found = hint(refusal("seed", *place, *bad), r"'(\S+)': .* applies to tsctl train: drop it here(?:, with (.+), which only it reads)?$")
    dropped = [found.group(1), *(found.group(2) or "").split(" and ")]
    assert dropped == [b.split("=")[0] for b in bad]
    succeeds("seed", *place, *[b for b in bad if b.split("=")[0] not in dropped], words="wrote 4 prompts x 1 seeds")


def test_a_resume_meets_a_seed_row_of_another_prompt_and_regenerates_the_deleted_shard(run: Run) -> None:
    shutil.rmtree(run.path / "checkpoints" / "step-2")  # the resume starts at step 1, whose seeds are rows 4..7
    shard_path = run.path / "seeds" / "step-000000.parquet"
    shard = read_shard(shard_path, "seed")
    cols = shard.table.to_pydict()
    written = {name: list(values) for name, values in cols.items()}
    for values in cols.values():
        values[4], values[5] = values[5], values[4]  # two prompts' seeds swapped, each block still one prompt's
    write_shard(shard_path, "seed", cols, shard.metadata, overwrite=True)
    line = refusal("train", *run.args, "resume=true")
    hint(line, rf"^error: {re.escape(str(shard_path))}: row 4 is for prompt \S+, expected \S+; delete the shard to regenerate it$")
    shard_path.unlink()
    checksum_path(shard_path).unlink()
    succeeds("train", *run.args, "resume=true", words="run complete")
    assert pq.read_table(shard_path).to_pydict() == written  # written again from the window's behaviour policy, as it was


# Other commands.


def test_report_with_an_override_it_does_not_read_dropped(run: Run) -> None:
    line = refusal("report", str(run.path), "trainer.steps=3")
    hint(line, r"\(got trainer\.steps=3\); drop them")
    succeeds("report", str(run.path), words=f"report: {run.path / 'plots'}")
    assert (run.path / "plots" / "summary.md").is_file()


def test_a_data_file_whose_suffix_tells_no_format_renamed_trains(run: Run, tmp_path: Path) -> None:
    data = tmp_path / "sums.txt"
    data.write_text("".join(json.dumps({"question": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(20)))
    own = f"model.path={run.path / 'checkpoints' / 'step-2'}"  # a model of one's own: no warm-up on the file's rows
    args = [*with_name(run.args, "sums"), *SHORT, own, "task=file", "task.file.grader=numeric"]
    line = refusal("train", *args, f"task.file.train_path={data}")
    suffix = hint(line, r"name it (\.jsonl) or \.parquet$").group(1)  # no format setting to suggest for a file task
    data.rename(data.with_suffix(suffix))
    succeeds("train", *args, f"task.file.train_path={data.with_suffix(suffix)}", words="run complete")


def test_a_benchmark_whose_suffix_tells_no_format_given_one(run: Run, tmp_path: Path) -> None:
    data = tmp_path / "sums.txt"
    data.write_text("".join(json.dumps({"problem": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(4)))
    bench = tmp_path / "sums.yaml"
    bench.write_text(f"name: sums\npath: {data}\ngrader: numeric\n")
    args = [*run.args, f"eval.checkpoint={run.path}", f"eval.benchmarks=[{bench}]"]
    line = refusal("eval", *args)
    setting = hint(line, r"\(or set (format): (jsonl) or parquet in the sums benchmark config\)$").groups()
    bench.write_text(bench.read_text() + f"{setting[0]}: {setting[1]}\n")
    succeeds("eval", *args, words="results of step-2")
    assert (run.path / "eval" / "step-2" / "sums.json").is_file()


def test_eval_of_a_path_that_does_not_exist_then_of_the_run(run: Run) -> None:
    args = [*run.args, "eval.limit=4"]
    line = refusal("eval", *args, f"eval.checkpoint={run.path}-typo")
    hint(line, r"does not exist; pass a run folder \(with checkpoints/\) or a model folder \(with config\.json\)$")
    succeeds("eval", *args, f"eval.checkpoint={run.path}", words="results of step-2")
    succeeds("eval", *args, f"eval.checkpoint={run.path / 'checkpoints' / 'step-1'}", words="results of step-1")


def test_ctrl_c_while_a_run_starts_then_the_same_command(micro: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tsctl.stages.train as train_stage

    check, pressed = train_stage.check_data, []

    def ctrl_c_once(*args, **kwargs):
        if not pressed:
            pressed.append(1)
            raise KeyboardInterrupt
        return check(*args, **kwargs)

    monkeypatch.setattr(train_stage, "check_data", ctrl_c_once)
    done = tsctl("train", *micro, *SHORT, "name=pressed", check=False)
    assert done.returncode == 130 and done.stderr.strip() == "interrupted; rerun the same command (with resume=true if its run folder exists)"
    assert not (tmp_path / "runs" / "default" / "pressed").exists()  # no run folder: the same command, without resume=true
    succeeds("train", *micro, *SHORT, "name=pressed", words="run complete")
