"""``scripts/results_scoring.py``: the warm-up model and every kept checkpoint scored as the final evaluation scores a run."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tsctl.cli import app
from tsctl.engines.factory import load_policy
from tsctl.evaluation.scoring import final_eval
from tsctl.io.runs import RunDir
from tsctl.models.builtin import builtin_dir, weights_digest
from tsctl.stages.ablate import final_eval as run_final_eval
from tsctl.runconfig import compose_config
from tsctl.analysis.points import find_runs
from tsctl.trainer.rollout import servable_task

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scoring():
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("results_scoring", ROOT / "scripts" / "results_scoring.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a micro run of the command line
def test_every_kept_checkpoint_is_scored_and_the_last_equals_the_final_evaluation(scoring, micro, tmp_path):
    args = [*micro, "trainer.keep_checkpoints=0", "name=kept"]
    assert CliRunner().invoke(app, ["train", *args]).exit_code == 0
    run = tmp_path / "runs" / "default" / "kept"
    cfg = compose_config(args).cfg
    written = scoring.score_trajectory(run, tmp_path / "trajectory", lambda r: cfg)
    assert [p.name for p in written] == ["step-000002.json", "step-000003.json"]  # micro: a checkpoint each 2 steps and the last
    assert scoring.score_trajectory(run, tmp_path / "trajectory", lambda r: cfg) == []  # scored once
    last, final = json.loads(written[-1].read_text()), run_final_eval(cfg, RunDir(run))
    assert last["step"] == final["step"] == 3
    assert {k: last[k] for k in ("pass@1", "pass@2", "pass@4", "pass@8")} == {k: final[k] for k in ("pass@1", "pass@2", "pass@4", "pass@8")}
    assert last["per_problem"]["sampled"] == final["per_problem"]["sampled"]
    assert set(last) >= {f"pass@{k}" for k in range(1, cfg.eval.k + 1)}


def test_the_warm_up_is_scored_once_per_sampling_seed_as_a_run_of_that_seed_would_be(scoring, micro, tmp_path):
    cfg = compose_config(micro).cfg
    CliRunner().invoke(app, ["warmup", *micro])
    model = builtin_dir(cfg)
    digest = weights_digest(model)
    figures = tmp_path / "figures"
    written = scoring.score_warmup(figures, micro, model, digest, 2)
    assert written == [figures / "warmup" / f"arithmetic-{digest}" / f"seed={s}" for s in (0, 1)]
    assert scoring.score_warmup(figures, micro, model, digest, 2) == []
    runs = find_runs(written[0].parent)  # the records read as runs: one per seed
    assert [r.seed for r in runs] == ["0", "1"] and all(r.base_weights == digest for r in runs)
    seed1 = compose_config([*micro, "seed=1"]).cfg
    policy = load_policy(seed1, str(model))
    expected = final_eval(policy.engine, policy.formatter, servable_task(seed1, policy.formatter, policy.engine), seed1, 0)
    assert runs[1].final == json.loads(json.dumps(expected))
    assert runs[0].final["greedy_accuracy"] == runs[1].final["greedy_accuracy"]  # greedy decoding does not read the seed
