"""Every tensor of a training step lives on the model's device.

The model is moved to a simulated accelerator (``tests/simulated_device.py``): its tensors report
another device and every op checks, as a CUDA kernel does, that its tensor arguments agree. A whole
train step (seeds, rollout with the ``hf`` engine, pi_old and reference recomputes, loss mask,
update) then fails on any tensor built on the CPU and handed to a device op.
"""

from __future__ import annotations

import pytest
import torch

from simulated_device import DEVICE, DeviceMismatch, OnDevice, SimulatedDevice, to_device
from tsctl.engines.hf import HFEngine
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.bank import SeedBank
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task
from tsctl.trainer.context import StepContext
from tsctl.trainer.learner import Learner
from tsctl.trainer.optim import lr_lambda
from tsctl.models.forward import Forward
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.reference import reference_logprobs
from tsctl.trainer.rollout import Sampler
from tsctl.trainer.step import train_step

BASE = [
    "model=micro", "task=arithmetic", "task.train_size=200", "task.heldout_size=20", "engine.max_new_tokens=12",
    "trainer=micro", "trainer.batch_size=2", "trainer.n=4", "trainer.mini_batches=2", "trainer.micro_batch_tokens=60",
    "ratio=50", "refresh=1", "algo.kl_coef=0.1", "algo.entropy_coef=0.01", "algo.overlong=mask",
    "trainer.old_logprobs=recompute",
]


@pytest.fixture
def engine_on_device(monkeypatch):
    """What the simulated device lacks for the engine: a random generator of its own (the engine draws
    with a CPU one) and views of its tensors in inference mode (no-grad mode serves instead)."""
    cpu_class = torch.Generator
    monkeypatch.setattr(torch, "Generator", lambda device=None: cpu_class())
    monkeypatch.setattr(torch, "inference_mode", torch.no_grad)


def run_step(tmp_path, overrides: list[str], placement: str = "policy") -> tuple[dict, torch.nn.Module, dict]:
    """One train step (step 0, with its seed window) with policy (and reference) on the simulated device."""
    cfg = compose_config([*BASE, f"algo.ref_placement={placement}", *overrides]).cfg
    tokenizer = build_char_tokenizer()
    formatter = PromptFormatter(tokenizer, use_chat_template=False)
    task = build_task(cfg.task)
    problems = list(task.problems("train"))
    model = build_tiny_model(cfg.model.tiny, tokenizer, seed=0)
    ref = build_tiny_model(cfg.model.tiny, tokenizer, seed=1).eval()  # not the policy: the KL is well above 0
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with SimulatedDevice() as mode:
        to_device(model)
        if placement == "policy":
            to_device(ref)
        engine = HFEngine(model, formatter.eos_id, formatter.pad_id)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
        seeds = SeedBank(tmp_path / "seeds", cfg, formatter, task, problems, tmp_path / "checkpoints", "unused")
        seeds.prepare(0, model, engine)
        learner = Learner(cfg, Parallel(model), engine=engine)
        learner.optimizer, learner.scheduler, learner.reference = optimizer, scheduler, ref
        record = train_step(0, StepContext(cfg, Sampler(engine, formatter, task, problems=problems), learner, seeds))
        after = {k: v.data_cpu.clone() for k, v in model.state_dict().items()}
        assert mode.ops_on_device > 1000  # the step really ran on the simulated device
    return record, before, after


@pytest.mark.parametrize(
    "overrides", [[], ["trainer.share_prompts=false", "trainer.micro_batch_tokens=0"], ["trainer.old_logprobs=engine"]]
)
def test_a_train_step_keeps_every_tensor_on_the_model_device(tmp_path, engine_on_device, overrides):
    record, before, after = run_step(tmp_path, overrides)
    assert record["samples"] == 8 and record["seeds/prefix_tokens"] > 0
    assert all(key in record for key in ("kl_ref", "clipped", "entropy"))
    assert ("logprob_gap/abs_mean" in record) == ("trainer.old_logprobs=engine" not in overrides)
    assert all(torch.isfinite(torch.tensor(v)) for v in record.values() if isinstance(v, float))
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_a_reference_model_on_the_cpu_serves_a_policy_on_the_device(tmp_path, engine_on_device):
    on_cpu, *_ = run_step(tmp_path / "cpu", [], placement="cpu")
    beside, *_ = run_step(tmp_path / "policy", [], placement="policy")
    # The same step, the reference (another initialisation than the policy's) wherever it sits: its
    # log-probs come back to the device whole, so the KL to it is the same, and well above 0.
    assert on_cpu["kl_ref"] > 0.01
    assert on_cpu["kl_ref"] == pytest.approx(beside["kl_ref"], rel=1e-5)


def test_the_reference_model_is_offloaded_between_forwards(tmp_path):
    cfg = compose_config([*BASE, "algo.ref_placement=offload"]).cfg
    tokenizer = build_char_tokenizer()
    ref = build_tiny_model(cfg.model.tiny, tokenizer, seed=0).eval()
    from tsctl.models.batch import collate
    from tsctl.models.samples import Sample

    samples = [Sample(group=0, prompt_id="p", prompt_ids=[5, 6, 7], generated_ids=[8, 9], generated_logprobs=[0.0, 0.0], finished=True)] * 2
    cpu_batch = collate(samples, torch.zeros(2), 0)
    expected = reference_logprobs(ref, cpu_batch, Forward.of(cfg), cfg.algo.ref_placement)
    seen: list[torch.device] = []
    ref.get_decoder().register_forward_pre_hook(lambda module, args: seen.append(next(module.parameters()).device))
    with SimulatedDevice():
        got = reference_logprobs(ref, collate(samples, torch.zeros(2), 0, DEVICE), Forward.of(cfg), cfg.algo.ref_placement)
        assert isinstance(got, OnDevice)
        got = got.cpu()
    assert set(seen) == {DEVICE} and next(ref.parameters()).device.type == "cpu"  # ran on the device, kept on the CPU
    torch.testing.assert_close(got, expected)


def test_the_simulated_device_catches_a_cpu_tensor_in_a_device_op():
    with SimulatedDevice():
        weight = OnDevice(torch.ones(3, 3))
        with pytest.raises(DeviceMismatch):
            torch.ones(2, 3) @ weight
        assert (torch.ones(2, 3).to(DEVICE) @ weight).cpu().sum().item() == 18  # moved first: fine
