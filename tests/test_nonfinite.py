"""The non-finite guard: a NaN/Inf loss, gradient or parameter stops the run (or skips the mini-batch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_update import PAD, config, rows, run_update, tiny_model

from conftest import metrics as run_metrics, tsctl
from tsctl.algo.objective import Objective
from tsctl.config.errors import ConfigError
from tsctl.models.batch import collate
from tsctl.runconfig import compose_config
from tsctl.trainer.nonfinite import NonFiniteError, NonFiniteGuard


def linear_with_grads(weight_grad: float, bias_grad: float) -> torch.nn.Linear:
    layer = torch.nn.Linear(2, 1)
    layer.weight.grad = torch.full_like(layer.weight, weight_grad)
    layer.bias.grad = torch.full_like(layer.bias, bias_grad)
    return layer


def grad_norm(layer: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.get_total_norm([p.grad for p in layer.parameters()])


def test_finite_mini_batches_pass():
    layer = linear_with_grads(1.0, 2.0)
    assert NonFiniteGuard().admit(layer, torch.tensor(0.5), grad_norm(layer), 1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_gradient_stops_naming_the_tensor(bad):
    layer = linear_with_grads(1.0, bad)
    guard = NonFiniteGuard()
    guard.begin_step(4)
    with pytest.raises(NonFiniteError, match=r"non-finite gradient at step 4, mini-batch 2: bias") as err:
        guard.admit(layer, torch.tensor(0.5), grad_norm(layer), 2)
    assert err.value.manifest_fields() == {"failed_step": 4, "nonfinite": "gradient", "nonfinite_tensor": "bias"}
    assert "trainer.nonfinite=skip" in str(err.value) and "\n" not in str(err.value)


def test_a_non_finite_loss_stops_before_the_gradient_is_looked_at():
    layer = linear_with_grads(1.0, 1.0)
    with pytest.raises(NonFiniteError, match=r"non-finite loss \(nan\)") as err:
        NonFiniteGuard().admit(layer, torch.tensor(float("nan")), grad_norm(layer), 1)
    assert err.value.kind == "loss" and err.value.tensor == "loss"


def test_skip_mode_skips_up_to_the_limit_then_stops():
    layer = linear_with_grads(float("nan"), 1.0)
    guard = NonFiniteGuard("skip", max_skips=2)
    guard.begin_step(1)
    assert not guard.admit(layer, torch.tensor(0.0), grad_norm(layer), 1)
    guard.begin_step(2)
    assert not guard.admit(layer, torch.tensor(0.0), grad_norm(layer), 1)
    assert guard.skips == 2 and guard.skipped_this_step == 1
    with pytest.raises(NonFiniteError, match=r"after 2 skipped \(trainer.max_nonfinite_skips=2\)"):
        guard.admit(layer, torch.tensor(0.0), grad_norm(layer), 2)


def test_non_finite_parameters_stop_naming_the_tensor_and_huge_finite_ones_do_not():
    layer = torch.nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.fill_(1e30)  # its 2-norm overflows float32, its values do not
    NonFiniteGuard().check_parameters(layer, 1)
    with torch.no_grad():
        layer.bias[1] = float("nan")
    with pytest.raises(NonFiniteError, match=r"non-finite parameter at step 0, mini-batch 3: bias after the optimiser step"):
        NonFiniteGuard("skip", 5).check_parameters(layer, 3)


def nan_row_batch():
    """Eight rows whose fourth has a NaN advantage (its mini-batch's loss is NaN)."""
    adv = torch.linspace(-1, 1, 8)
    adv[3] = float("nan")
    return collate(rows(8), adv, PAD)


def test_policy_update_stops_before_the_bad_step_is_applied():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = config(1)
    with pytest.raises(NonFiniteError, match="non-finite loss"):
        run_update(model, nan_row_batch(), cfg, lr=0.1)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_policy_update_skips_the_bad_mini_batch_and_keeps_its_metrics_out():
    cfg = config(2)
    cfg.trainer.nonfinite = "skip"
    model = tiny_model()
    metrics, optimizer = run_update(model, nan_row_batch(), cfg, lr=0.1)
    means = metrics.means()
    assert len(optimizer.grads) == 1  # one of the two optimiser steps ran
    assert means["nonfinite_skips"] == 1
    assert all(torch.isfinite(torch.tensor(v)) for v in means.values())
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    # the default run logs no skip count (there are none to count)
    assert "nonfinite_skips" not in run_update(tiny_model(), collate(rows(8), torch.linspace(-1, 1, 8), PAD), config(2))[0].means()


def test_config_keys_are_validated():
    cfg = compose_config([]).cfg
    assert cfg.trainer.nonfinite == "stop" and cfg.trainer.max_nonfinite_skips == 10
    with pytest.raises(ConfigError, match="trainer.nonfinite"):
        compose_config(["trainer.nonfinite=ignore"])
    with pytest.raises(ConfigError, match="trainer.max_nonfinite_skips"):
        compose_config(["trainer.max_nonfinite_skips=-1"])


def assert_checkpoints_finite(run: Path) -> list[str]:
    names = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    for name in names:
        tensors = load_file(run / "checkpoints" / name / "model.safetensors")
        assert all(bool(torch.isfinite(t).all()) for t in tensors.values()), name
    return names


@pytest.mark.slow
def test_a_nan_at_step_three_keeps_the_good_checkpoints_and_fails_the_run(micro, tmp_path, monkeypatch):
    from tsctl.stages.train import train

    calls = []
    original = Objective.loss

    def nan_from_fifth_call(self, tokens, norms):  # 2 mini-batches a step: call 5 is step 3's first
        calls.append(1)
        loss = original(self, tokens, norms)
        if len(calls) >= 5:
            loss.value = loss.value * float("nan")
        return loss

    monkeypatch.setattr(Objective, "loss", nan_from_fifth_call)
    composed = compose_config([*micro, "name=nan", "trainer.steps=4", "trainer.save_every=1", "trainer.keep_checkpoints=0", "trainer.eval_every=0"])
    with pytest.raises(NonFiniteError, match="step 3, mini-batch 1"):
        train(composed)
    run = tmp_path / "runs" / "default" / "nan"
    assert assert_checkpoints_finite(run) == ["step-1", "step-2"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["failed_step"] == 3
    assert manifest["nonfinite"] == "loss" and manifest["nonfinite_tensor"] == "loss"
    assert [r["step"] for r in run_metrics(run)] == [1, 2]


@pytest.mark.slow
def test_a_huge_learning_rate_fails_the_run_with_one_line(micro, tmp_path):
    proc = tsctl("train", *micro, "name=lr", "trainer.lr=1e6", "trainer.warmup_steps=0", "trainer.save_every=1", check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "non-finite" in line]
    assert len(lines) == 1 and lines[0].startswith("error: non-finite") and "trainer.lr" in lines[0]
    run = tmp_path / "runs" / "default" / "lr"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["failed_step"] == 1 and manifest["nonfinite_tensor"]
    assert assert_checkpoints_finite(run) == []
    assert all(r["step"] == 0 for r in run_metrics(run))


@pytest.mark.slow
def test_skip_mode_counts_skipped_mini_batches_then_stops(micro, tmp_path):
    args = [*micro, "name=skip", "trainer.lr=1e6", "trainer.warmup_steps=0", "trainer.save_every=1", "trainer.eval_every=0"]
    proc = tsctl("train", *args, "trainer.nonfinite=skip", "trainer.max_nonfinite_skips=2", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "after 2 skipped (trainer.max_nonfinite_skips=2)" in proc.stdout + proc.stderr
    run = tmp_path / "runs" / "default" / "skip"
    records = run_metrics(run)
    assert records and sum(r["nonfinite_skips"] for r in records) <= 2
    assert all(k.startswith("time/") or v == v for r in records for k, v in r.items() if isinstance(v, float))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["failed_step"] == len(records) + 1
    assert_checkpoints_finite(run)
