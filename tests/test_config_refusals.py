"""Config refusals of the catalogue of bad inputs that need no run: settings a command would accept and ignore,
points of a sweep that compose to the same run, numbers outside the range of the library that receives them.

Each: one ``error:`` line holding the named words, nothing written, then the suggestion applied passes
(``--cfg job``, or the sweep's plan).
"""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tsctl.cli import app
from tsctl.config.errors import ConfigError
from tsctl.stages.ablate import plan

runner = CliRunner()


def errors(command: str, args: list[str]) -> tuple[int, list[str]]:
    """``tsctl COMMAND ARGS``: its exit code and its ``error:`` lines (no traceback allowed)."""
    result = runner.invoke(app, [command, *args])
    assert "Traceback" not in result.output and not isinstance(result.exception, (AssertionError, TypeError, ValueError)), result.output
    return result.exit_code, [line for line in result.output.splitlines() if line.startswith("error:")]


def refused_here(tmp_path: Path, command: str, args: list[str], words: list[str]) -> str:
    """``tsctl COMMAND ARGS`` into ``tmp_path`` refused in one line holding ``words``, with nothing written."""
    code, found = errors(command, [*args, f"runs_dir={tmp_path}"])
    assert code == 2 and len(found) == 1, found
    for word in words:
        assert word in found[0], (word, found[0])
    assert not list(tmp_path.iterdir())
    return found[0]


def passes_cfg(command: str, args: list[str], tmp_path: Path) -> None:
    assert errors(command, [*args, f"runs_dir={tmp_path}", "--cfg", "job"]) == (0, [])


@pytest.mark.parametrize(
    "command, bad, words, fixed, sweep",
    [
        ("train", ["hydra.run.dir=/tmp/elsewhere"], ["'hydra.run.dir'", "a Hydra setting, which tsctl train would ignore", "drop it"], [], None),
        ("eval", ["hydra.job.chdir=true"], ["'hydra.job.chdir'", "tsctl eval would ignore"], [], None),
        ("train", ["hydra/launcher=joblib"], ["'hydra/launcher'", "under tsctl ablate (which takes hydra/launcher=..."], [], None),
        ("train", ["--multirun", "ratio=0,25"], ["'--multirun'", "train a sweep with `tsctl ablate <overrides>`"], ["ratio=25"], ["ratio=0,25"]),
        ("train", ["ratio=0,25"], ["ratio=0,25 sweeps several values, but tsctl train runs one config",
                                   "or train one run per value with `tsctl ablate ratio=0,25 ...`"], ["ratio=25"], ["ratio=0,25"]),
        ("eval", ["seed=range(0,3)"], ["'seed'", "tsctl eval runs one config; choose one value, or run it once per value"], ["seed=2"], None),
        ("train", ["shards.out_dir=/tmp/shards"], ["'shards.out_dir'", "tsctl train does not read it (tsctl seed and tsctl rollout do)"], [], None),
        ("seed", ["report.level=0.9"], ["'report.level'", "(tsctl ablate and tsctl report do)"], [], None),
        ("eval", ["resume=true"], ["'resume'", "tsctl eval does not read it (tsctl train does)"], [], None),
        ("ablate", ["-m", "ratio=0,25"], ["'-m'", "tsctl ablate is a multirun already; drop -m"], ["ratio=0,25"], None),
        ("warmup", ["--rebuilt"], ["'--rebuilt'", "tsctl warmup has no option --rebuilt; see tsctl warmup --help"], ["--rebuild"], None),
    ],
    ids=["hydra-run-dir", "hydra-chdir", "launcher-outside-ablate", "multirun-flag", "sweep-in-train", "sweep-in-eval", "shards-in-train",
         "report-in-seed", "resume-in-eval", "multirun-in-ablate", "misspelt-option"],
)
def test_a_setting_the_command_would_ignore_is_refused(tmp_path, command, bad, words, fixed, sweep):
    refused_here(tmp_path, command, [*bad, "--cfg", "job"], words)
    passes_cfg(command, fixed, tmp_path)  # dropped (or one value)
    if sweep is not None:
        passes_cfg("ablate", sweep, tmp_path)  # the sweep, as tsctl ablate takes it


def test_ablate_refuses_the_hydra_settings_it_sets_itself_and_takes_its_launcher(tmp_path):
    refused_here(tmp_path, "ablate", ["ratio=0,25", "hydra.sweep.dir=/tmp/elsewhere"], [
        "'hydra.sweep.dir'", "tsctl ablate takes only Hydra's launcher settings (hydra/launcher=..., hydra.launcher.*)", "drop it",
    ])
    swept = plan(["ratio=0,25", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"runs_dir={tmp_path}"])
    assert swept.hydra_overrides == ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"] and swept.folders == ["ratio=0", "ratio=25"]


@pytest.mark.parametrize(
    "sweep, words, fix, points",
    [
        (["ratio=0,25", "refresh=5,20"], ["'refresh'", "points ratio=0-refresh=5 and ratio=0-refresh=20 of this sweep compose to the same run",
                                           "refresh=20 cannot take effect there (it is read by Thinking Seeds runs only and ratio=0)",
                                           "sweep refresh only over points where it takes effect"], ["ratio=25", "refresh=5,20"], 2),
        (["ratio=0,25", "truncation=uniform,fixed"], ["points ratio=0-truncation=uniform and ratio=0-truncation=fixed"],
         ["ratio=25", "truncation=uniform,fixed"], 2),
        (["ratio=0,25", "seeds.selector=latest,bandit", "seeds.pool_size=3"], ["'seeds.selector'", "points ratio=0-seeds.selector=latest and "
                                                                              "ratio=0-seeds.selector=bandit"], ["ratio=25", "seeds.selector=latest,bandit", "seeds.pool_size=3"], 2),
        (["ratio=25,25.0"], ["points ratio=25 and ratio=25.0 of this sweep compose to the same run (one value written twice); list each value once"],
         ["ratio=25"], 1),
        (["trainer.n=4", "ratio=25,25.5,30"], ["'ratio'", "ratio=25.5 seeds round(4 x 25.5 / 100) = 1 of the trainer.n=4 samples of each group, "
                                               "which is ratio=25", "ratio=25 or ratio=50"], ["trainer.n=4", "ratio=25,50"], 2),
    ],
    ids=["idle-refresh", "idle-truncation", "idle-selector", "same-value", "inexact-ratio"],
)
def test_points_that_compose_to_the_same_run_are_refused(tmp_path, sweep, words, fix, points):
    refused_here(tmp_path, "ablate", sweep, words)
    with pytest.raises(ConfigError):
        plan([*sweep, f"runs_dir={tmp_path}"])
    assert len(plan([*fix, f"runs_dir={tmp_path}"]).points) == points  # the fix: each point another run


@pytest.mark.parametrize(
    "bad, words, fixed",
    [
        (["seed=-1"], ["'seed'", "out of range for a seed: numpy's generators take 0 or more", "e.g. seed=0"], ["seed=0"]),
        (["seed=18446744073709551616"], ["'seed'", "allowed: 0 <= seed <= 2**63 - 1"], ["seed=0"]),
        (["task.data_seed=-5"], ["'task.data_seed'", "e.g. task.data_seed=1234"], ["task.data_seed=1234"]),
        (["model.warmup.seed=9223372036854775808"], ["'model.warmup.seed'"], ["model.warmup.seed=0"]),
        (["trainer.lr=nan"], ["'trainer.lr'", "nan is not a finite number", "e.g. trainer.lr=5e-05"], ["trainer.lr=5e-05"]),
        (["trainer.weight_decay=nan"], ["'trainer.weight_decay'", "not a finite number"], ["trainer.weight_decay=0.0"]),
        (["trainer.logits_chunk_mib=inf"], ["'trainer.logits_chunk_mib'", "inf is not a finite number"], ["trainer.logits_chunk_mib=512.0"]),
        (["engine.temperature=nan"], ["'engine.temperature'"], ["engine.temperature=0.6"]),
        (["model.tiny.hidden_size=18446744073709551616"], ["'model.tiny.hidden_size'", "does not fit the 64-bit integers torch and numpy hold"],
         ["model.tiny.hidden_size=160"]),
        (["trainer.eval_problems=-1"], ["'trainer.eval_problems'", "must be >= 0"], ["trainer.eval_problems=0"]),
        (["trainer.eval_samples=0"], ["'trainer.eval_samples'", "must be > 0"], ["trainer.eval_samples=1"]),
        (["model.warmup.weight_decay=-0.1"], ["'model.warmup.weight_decay'", "must be >= 0"], ["model.warmup.weight_decay=0.01"]),
    ],
    ids=lambda v: v[0] if isinstance(v, list) and v and "=" in v[0] else None,
)
def test_a_number_outside_its_librarys_range_is_refused_before_any_run(tmp_path, bad, words, fixed):
    refused_here(tmp_path, "train", [*bad, "--cfg", "job"], words)
    passes_cfg("train", fixed, tmp_path)


@pytest.mark.parametrize("key, extra", [("seeds.source_path", ["ratio=25", "seeds.source=traces"]), ("eval.benchmarks", [])])
def test_a_folder_where_a_file_is_expected_is_named_as_a_folder(tmp_path, key, extra):
    folder, runs = tmp_path / "data", tmp_path / "runs"
    folder.mkdir()
    runs.mkdir()
    good = tmp_path / ("bench.yaml" if key == "eval.benchmarks" else "traces.jsonl")
    good.write_text("name: bench\npath: data.jsonl\n" if key == "eval.benchmarks" else '{"prompt_id": "p", "response": "2"}\n')
    command, listed = ("eval", "[{}]") if key == "eval.benchmarks" else ("train", "{}")
    refused_here(runs, command, [*extra, f"{key}={listed.format(folder)}", "--cfg", "job"], [f"'{key}'", f"{folder} is a folder", "point"])
    passes_cfg(command, [*extra, f"{key}={listed.format(good)}"], runs)


@pytest.mark.parametrize("key", ["task.file.train_path", "task.file.heldout_path"])
def test_a_data_folder_where_a_file_is_expected_is_named_as_a_folder(tmp_path, key):
    from tsctl.runconfig import compose_config
    from tsctl.tasks.records import DataError
    from tsctl.tasks.registry import build_task

    folder, good = tmp_path / "data", tmp_path / "data.jsonl"
    folder.mkdir()
    good.write_text("".join(f'{{"question": "{i}+1", "answer": "{i + 1}"}}\n' for i in range(20)))
    train = [] if key == "task.file.train_path" else [f"task.file.train_path={good}"]
    with pytest.raises(DataError, match=f"{folder} is a folder, not a data file; point {key} at a JSONL or Parquet file"):
        build_task(compose_config(["task=file", *train, f"{key}={folder}"]).cfg.task)
    assert len(build_task(compose_config(["task=file", *train, f"{key}={good}"]).cfg.task).problems("heldout")) >= 2
