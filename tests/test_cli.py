"""The command line: help for every command, --cfg job, and one-line errors for user mistakes."""

import pytest
from typer.testing import CliRunner

from tsctl.cli import app

runner = CliRunner()
COMMANDS = ["warmup", "train", "seed", "rollout", "eval", "ablate", "report"]


def test_top_level_help_lists_every_command():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_explains_itself(command):
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Usage: tsctl " + command in " ".join(result.output.split())
    if command == "report":  # no knobs it would refuse: only its own keys and examples
        assert "report.baseline" in result.output and "trainer.steps" not in result.output
    else:
        assert "ratio" in result.output and "truncation" in result.output and "--cfg" in result.output


def test_cfg_job_prints_the_resolved_config():
    result = runner.invoke(app, ["train", "ratio=25", "trainer.steps=7", "--cfg", "job"])
    assert result.exit_code == 0
    assert "ratio: 25" in result.output and "steps: 7" in result.output and "truncation: uniform" in result.output


def test_cfg_job_names_the_engine_keys_the_chosen_engine_does_not_read():
    import yaml

    hf = runner.invoke(app, ["train", "--cfg", "job"]).output
    engine = yaml.safe_load(hf)["engine"]
    vllm = engine["vllm"]
    assert (engine["name"], vllm["dtype"], vllm["enable_sleep_mode"], vllm["max_model_len"]) == ("hf", None, None, None)
    assert hf.rstrip().splitlines()[-1] == (
        "# engine=hf does not read engine.vllm.gpu_memory_utilization, engine.vllm.tensor_parallel_size, engine.vllm.dtype, "
        "engine.vllm.max_model_len, engine.vllm.enable_sleep_mode, engine.vllm.enforce_eager"
    )
    assert "does not read" not in runner.invoke(app, ["train", "engine=vllm", "--cfg", "job"]).output


@pytest.mark.parametrize(
    "args, words",
    [
        (["train", "ratio=140"], "ratio"),
        (["train", "truncation=middle"], "choose one of fixed"),
        (["train", "trainer.stepz=3"], "unknown key"),
        (["eval", "eval.checkpoint=/nonexistent/model"], "does not exist"),
        (["train", "model.path=/nonexistent/model"], "does not exist"),
    ],
)
def test_user_mistakes_exit_2_with_one_line_and_no_traceback(args, words, tmp_path):
    result = runner.invoke(app, [*args, f"runs_dir={tmp_path}"], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.startswith("error:") and words in result.output
    assert result.output.count("\n") == 1


def test_an_unknown_cfg_value_names_cfg_job_which_then_works():
    result = CliRunner().invoke(app, ["train", "--cfg", "yaml"])
    assert result.exit_code == 2 and result.output.strip() == "error: config error at '--cfg': unknown value 'yaml'; use --cfg job"
    assert CliRunner().invoke(app, ["train", "--cfg", "job"]).exit_code == 0


def test_ctrl_c_before_training_says_to_rerun_and_the_rerun_trains(tmp_path, model_cache, monkeypatch):
    import tsctl.runconfig

    from conftest import micro_args

    args = ["train", *micro_args(tmp_path / "runs", model_cache)]
    composed = tsctl.runconfig.compose_config

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(tsctl.runconfig, "compose_config", ctrl_c)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 130 and result.output.strip() == "interrupted; rerun the same command (with resume=true if its run folder exists)"
    assert not (tmp_path / "runs").exists()
    monkeypatch.setattr(tsctl.runconfig, "compose_config", composed)
    assert CliRunner().invoke(app, args).exit_code == 0
