"""``tsctl eval`` and ``tsctl report`` name every NaN/Inf metric they print (which checkpoint or run, which step)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from rich.console import Console
from test_report import fake_run

from conftest import tsctl
from tsctl.evaluation.nan_warnings import eval_warnings, nonfinite, run_warnings
from tsctl.evaluation.table import print_results
from tsctl.analysis.report import report

NAN = float("nan")


def result(entropy: float, step: int | None = 3) -> dict:
    return {
        "checkpoint": "step-3", "checkpoint_path": "runs/default/a/checkpoints/step-3", "step": step, "benchmark": "heldout",
        "problems": 4, "skipped_rows": 0, "k": 2, "greedy_accuracy": 0.25, "pass@1": 0.5, "entropy": entropy,
        "mean_length": 9.0, "truncation_rate": 0.0, "sampling": {"temperature": 0.6, "top_p": 1.0, "max_new_tokens": 24, "seed": 0},
        "seconds": 1.0,
    }


def test_nonfinite_is_true_for_nan_and_inf_floats_only():
    assert [nonfinite(v) for v in (NAN, float("inf"), -float("inf"), 1.0, 0, "nan", None)] == [True, True, True, False, False, False, False]


def test_eval_warns_with_the_checkpoint_step_benchmark_and_metric():
    assert eval_warnings([result(0.4)]) == []
    (line,) = eval_warnings([result(0.4), result(NAN)])
    assert line.startswith("runs/default/a/checkpoints/step-3 (step 3) on heldout: entropy = nan;")
    assert "(step" not in eval_warnings([result(float("inf"), step=None)])[0]


def test_the_eval_table_is_followed_by_the_warning():
    out = io.StringIO()
    print_results([result(NAN)], Console(file=out, width=200))
    text = out.getvalue()
    assert "nan" in text and "warning: non-finite metric: runs/default/a/checkpoints/step-3 (step 3) on heldout: entropy = nan" in text
    out = io.StringIO()
    print_results([result(0.5)], Console(file=out, width=200))
    assert "warning" not in out.getvalue()


def test_run_warnings_name_the_run_the_metric_and_the_first_bad_step():
    records = [{"step": 1, "entropy": 1.0}, {"step": 2, "entropy": NAN, "grad_norm": NAN}, {"step": 3, "entropy": NAN}]
    assert run_warnings("r", {"entropy/plain": 1.0}, records) == []
    (line,) = run_warnings("r", {"entropy/plain": NAN, "greedy_accuracy": 0.5}, records)
    assert line == "run r: entropy/plain not finite; metrics.jsonl has NaN/Inf at 2 step(s), first at step 2 (entropy, grad_norm)"


def test_report_warns_on_the_console_and_in_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture):
    root = tmp_path / "sweep"
    fake_run(root / "ratio=0-seed=1", 0, 1, 0.2)
    bad = fake_run(root / "ratio=0-seed=2", 0, 2, 0.4)
    records = [json.loads(line) for line in (bad / "metrics.jsonl").read_text().splitlines()]
    for r in records[7:]:
        r["entropy_by_source/plain"] = NAN
    (bad / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = report(root)
    expected = "run ratio=0-seed=2: entropy/plain not finite; metrics.jsonl has NaN/Inf at 4 step(s), first at step 7"
    assert expected in (out / "summary.md").read_text()
    assert expected in " ".join(capsys.readouterr().err.split())
    assert "ratio=0-seed=1" not in (out / "summary.md").read_text().split("Warning")[-1]


@pytest.mark.slow
def test_eval_of_a_nan_checkpoint_says_so(micro: list[str], tmp_path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tsctl.runconfig import compose_config
    from tsctl.stages.warmup import base_model_path

    base = base_model_path(compose_config(micro).cfg)
    model = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        next(model.parameters()).fill_(NAN)
    model.save_pretrained(tmp_path / "nan-model")
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp_path / "nan-model")
    proc = tsctl("eval", *micro, f"eval.checkpoint={tmp_path / 'nan-model'}", "eval.limit=2", "eval.k=2", "eval.pass_k=[1,2]")
    text = " ".join((proc.stdout + proc.stderr).split())
    assert f"warning: non-finite metric: {tmp_path / 'nan-model'} on heldout: entropy = nan" in text
