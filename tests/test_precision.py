"""fp32 master weights with bf16 autocast compute: the arithmetic, on CPU autocast."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from tsctl.cli import app
from tsctl.config.errors import ConfigError
from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.hf import HFEngine
from tsctl.engines.own_logprobs import uses_engine_logprobs
from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.forward import Forward
from tsctl.models.precision import autocast, require_fp32_master, resolve_compute_dtype
from tsctl.models.samples import Sample
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.runconfig import compose_config
from update_context import update, update_context

OVERRIDES = ["model=micro", "trainer=micro", "trainer.batch_size=2", "trainer.n=4", "trainer.mini_batches=1", "trainer.lr=1e-6", "trainer.warmup_steps=0"]


def batch_of_samples():
    """8 rows, 2 prompts, advantages of both signs."""
    samples = [
        Sample(group=i // 4, prompt_id="p", prompt_ids=[5 + i // 4, 6, 7], generated_ids=[10 + i, 11, 12 + i % 3][: 1 + i % 3],
               generated_logprobs=[0.0] * (1 + i % 3), finished=True)
        for i in range(8)
    ]
    return collate(samples, torch.tensor([1.0, -1.0, 0.5, -0.5] * 2), 0)


def one_update(model, overrides: list[str], hooks: dict | None = None) -> None:
    """One AdamW step of :func:`policy_update` at lr 1e-6 on a fixed batch."""
    cfg = compose_config([*OVERRIDES, *overrides]).cfg
    batch = batch_of_samples()
    old, _ = Forward.of(cfg).recompute(model, batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.trainer.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    update(update_context(cfg, model, optimizer, scheduler), batch, pi_b_on_prefix(old, batch))


def tiny(dtype: torch.dtype = torch.float32):
    cfg = compose_config(["model=micro"]).cfg
    return build_tiny_model(cfg.model.tiny, build_char_tokenizer(), seed=0).to(dtype)


def moved_fraction(before: dict, model) -> float:
    """Share of all weights whose value changed."""
    changed = sum(int((before[k] != v).sum()) for k, v in model.state_dict().items())
    return changed / sum(v.numel() for v in before.values())


def test_fp32_master_weights_move_at_lr_1e6_under_bf16_compute_where_bf16_weights_do_not():
    master = tiny(torch.float32)
    before = {k: v.clone() for k, v in master.state_dict().items()}
    one_update(master, ["model.compute_dtype=bfloat16"])
    assert all(p.dtype == torch.float32 for p in master.parameters())
    assert moved_fraction(before, master) > 0.99
    step = max(float((master.state_dict()[k] - before[k]).abs().max()) for k in before)
    assert 5e-7 < step < 2e-6  # Adam's first step: about lr per weight

    low = tiny(torch.bfloat16)  # what AdamW on bf16 parameters does: almost every update rounds away
    before = {k: v.clone() for k, v in low.state_dict().items()}
    one_update(low, ["model.dtype=bfloat16", "model.compute_dtype=bfloat16"])
    assert moved_fraction(before, low) < 0.05


def recorder(seen: dict, name: str):
    """A forward (or tensor) hook that records the dtype of the first output it sees under ``name``."""

    def hook(*args):
        seen.setdefault(name, args[-1].dtype)

    return hook


def test_the_training_forward_really_computes_in_bf16_over_fp32_parameters():
    model = tiny()
    seen: dict[str, torch.dtype] = {}
    model.model.layers[0].mlp.down_proj.register_forward_hook(recorder(seen, "matmul"))
    model.lm_head.register_forward_hook(recorder(seen, "logits"))
    model.model.layers[0].mlp.down_proj.weight.register_hook(recorder(seen, "grad"))
    one_update(model, ["model.compute_dtype=bfloat16"])
    assert seen == {"matmul": torch.bfloat16, "logits": torch.bfloat16, "grad": torch.float32}
    seen.clear()
    model = tiny()  # auto on the CPU: float32, no autocast at all
    model.model.layers[0].mlp.down_proj.register_forward_hook(recorder(seen, "matmul"))
    one_update(model, [])
    assert seen == {"matmul": torch.float32}


def test_compute_dtype_resolution_and_the_null_context_on_cpu():
    assert resolve_compute_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_compute_dtype("auto", "cpu") == torch.float32
    assert resolve_compute_dtype("bfloat16", "cpu") == torch.bfloat16
    with autocast("cpu", torch.float32):
        assert not torch.is_autocast_enabled("cpu")
    with autocast("cpu", torch.bfloat16):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_the_hf_engine_samples_under_the_compute_dtype():
    model = tiny().eval()
    seen = []
    model.lm_head.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    engine = HFEngine(model, end_ids=2, pad_id=0, compute_dtype=torch.bfloat16)
    out = engine.generate([Request(prompt_ids=[5, 6, 7])] * 3, SamplingParams(temperature=1.0, max_new_tokens=5, seed=1))
    assert set(seen) == {torch.bfloat16} and all(len(c.token_ids) == len(c.logprobs) > 0 for c in out)
    assert next(model.parameters()).dtype == torch.float32


def test_bf16_compute_makes_auto_recompute_pi_old():
    model = tiny()
    engine = HFEngine(model, end_ids=2, pad_id=0)
    assert uses_engine_logprobs(compose_config(["model=micro"]).cfg, engine, model)
    assert not uses_engine_logprobs(compose_config(["model=micro", "model.compute_dtype=bfloat16"]).cfg, engine, model)


def test_training_bf16_parameters_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="model.dtype=float32"):
        require_fp32_master("bfloat16")
    require_fp32_master("float32")
    result = CliRunner().invoke(app, ["train", "model.dtype=bfloat16", f"runs_dir={tmp_path / 'runs'}"], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and result.output.startswith("error:") and result.output.count("\n") == 1
    assert "model.compute_dtype" in result.output and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "override, key",
    [
        ("model.dtype=auto", "model.dtype"),
        ("model.compute_dtype=float16", "model.compute_dtype"),
        ("algo.ref_placement=gpu", "algo.ref_placement"),
        ("trainer.logits_chunk_mib=0", "trainer.logits_chunk_mib"),
        ("trainer.micro_batch_tokens=-1", "trainer.micro_batch_tokens"),
    ],
)
def test_new_keys_reject_bad_values(override, key):
    with pytest.raises(ConfigError) as err:
        compose_config([override])
    assert err.value.key == key


def test_fp32_compute_over_bf16_parameters_is_refused():
    with pytest.raises(ConfigError, match="model.compute_dtype"):
        compose_config(["model.dtype=bfloat16", "model.compute_dtype=float32"])
