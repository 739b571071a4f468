"""``trainer.compile``: the update's compiled decoder layers give the uncompiled log-probs, entropies, gradients, update
and run, every path (padded, packed, shared prompts, activation checkpointing, LoRA); a compiled run resumes exactly."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch._dynamo.utils import counters

from conftest import kill, reference_run, stable_metrics, tsctl
from test_packing import BATCH, batch_of, logprobs_and_grads
from test_shared_prompts import tiny_model

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import pi_b_on_prefix
from tsctl.models.compiled import CompiledLayers, compile_stats
from tsctl.models.forward import Forward
from tsctl.models.logprobs import enable_activation_checkpointing
from update_context import update, update_context

TOL = 1e-5


@pytest.fixture(autouse=True)
def fresh_compiler():
    """Each test compiles from nothing: graphs kept from an earlier test could fill the recompile limit, after which
    the layers would silently run uncompiled."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def assert_close(eager, compiled, mask) -> None:
    torch.testing.assert_close(compiled[0][mask], eager[0][mask], rtol=0, atol=TOL)
    torch.testing.assert_close(compiled[1][mask], eager[1][mask], rtol=0, atol=TOL)
    for a, b in zip(eager[2], compiled[2]):
        torch.testing.assert_close(b, a, rtol=0, atol=TOL)


@pytest.mark.parametrize("packed, share, family", [
    (False, False, "llama"), (False, True, "llama"), (True, False, "llama"), (True, True, "llama"), (True, True, "qwen2"),
], ids=["padded", "padded-shared", "packed", "packed-shared", "packed-shared-qwen2"])
def test_compiled_layers_give_the_eager_logprobs_entropies_and_gradients(packed, share, family):
    model = tiny_model("sdpa", family).train()
    batch = batch_of(BATCH)
    eager = logprobs_and_grads(model, batch, share_prompts=share, padding_free=packed)
    layers, before = CompiledLayers(model), compile_stats()
    with layers.active():
        compiled = logprobs_and_grads(model, batch, share_prompts=share, padding_free=packed)
    assert compile_stats().graphs > before.graphs  # the layers really ran compiled
    assert_close(eager, compiled, batch.resp_mask)
    assert all("forward" not in layer.__dict__ for layer in model.model.layers)  # the module's own forward is back
    with layers.active():
        again = logprobs_and_grads(model, batch, share_prompts=share, padding_free=packed)
    assert all(torch.equal(a, b) for a, b in zip(compiled[2], again[2]))  # the same compiled code: bit-identical


def test_activation_checkpointing_recomputes_through_the_compiled_layers():
    model = tiny_model().train()
    enable_activation_checkpointing(model)  # the packed forward then takes a block-diagonal mask
    batch = batch_of(BATCH)
    eager = logprobs_and_grads(model, batch, padding_free=True)
    with CompiledLayers(model).active():
        compiled = logprobs_and_grads(model, batch, padding_free=True)
    assert_close(eager, compiled, batch.resp_mask)


def test_compiled_layers_carrying_a_lora_adapter_give_the_eager_logprobs_and_adapter_gradients():
    from tsctl.config.schema.model import LoraConfig
    from tsctl.models.lora import add_adapter

    model = tiny_model().train()
    add_adapter(model, LoraConfig(rank=4, alpha=8.0), "base", seed=0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)  # a non-zero adapter, so its gradient reaches lora_A too
    batch = batch_of(BATCH)

    def adapter_grads():
        model.zero_grad()
        logprobs = Forward(0.7, padding_free=True).stats(model, batch).logprobs
        (logprobs * batch.resp_mask).sum().backward()
        return logprobs.detach(), [p.grad.clone() for p in model.parameters() if p.requires_grad]

    eager = adapter_grads()
    with CompiledLayers(model).active():
        compiled = adapter_grads()
    torch.testing.assert_close(compiled[0], eager[0], rtol=0, atol=TOL)
    assert len(eager[1]) == 2 * 7 * 2  # A and B of 7 projections in each of 2 layers
    for a, b in zip(eager[1], compiled[1]):
        torch.testing.assert_close(b, a, rtol=0, atol=TOL)


def test_no_cpp_compiler_is_refused_in_one_line_before_any_step():
    before = torch._inductor.config.cpp.cxx
    with torch._inductor.config.patch({"cpp.cxx": (None, "no-such-compiler++")}):  # restores the key (monkeypatch deletes it)
        with pytest.raises(ConfigError, match="trainer.compile.*needs a C\\+\\+ compiler.*trainer.compile=false"):
            CompiledLayers(tiny_model())
    assert torch._inductor.config.cpp.cxx == before


def test_a_model_without_a_list_of_decoder_layers_is_refused_in_one_line():
    model = tiny_model()
    model.model.layers = torch.nn.Sequential(*model.model.layers)
    with pytest.raises(ConfigError, match="LlamaForCausalLM keeps no list of decoder layers"):
        CompiledLayers(model)


def test_compiling_under_torchrun_is_refused_in_one_line():
    from tsctl.distributed.world import World
    from tsctl.trainer.step import setup

    cfg = TsctlConfig()
    cfg.trainer.compile = True
    with pytest.raises(ConfigError, match="compiling the update under torchrun .* is not supported.*trainer.compile=false"):
        setup(cfg, "unused", "unused", None, World(rank=0, size=2))


def run_update(compile_layers: bool, checkpointing: bool = False, wrap=None) -> tuple[dict, list[torch.Tensor]]:
    """One policy update (2 mini-batches, packed, prompts shared) of the same model and batch: its metrics and weights
    (``wrap``: applied to the compiled layers before the update)."""
    model = tiny_model().train()
    if checkpointing:
        enable_activation_checkpointing(model)
    cfg = TsctlConfig()
    cfg.trainer.mini_batches = 2
    batch = batch_of(BATCH)
    with torch.no_grad():
        old = pi_b_on_prefix(Forward(1.0).recompute(model.eval(), batch)[0], batch) - 0.01  # ratios off 1, some clipped
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    ctx = update_context(cfg, model, optimizer, scheduler)
    ctx.compiled = CompiledLayers(model) if compile_layers else None
    if wrap is not None:
        wrap(ctx.compiled)
    metrics = update(ctx, batch, old).means()
    return metrics, [p.detach().clone() for p in model.parameters()]


def test_a_checkpointed_compiled_update_recomputes_its_layers_compiled_in_backward():
    def saved_elements(compile_layers: bool, checkpointing: bool) -> tuple[int, list[torch.Tensor]]:
        """The elements the update's forwards kept for backward (every mini-batch's), and the updated weights."""
        kept = [0]

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            kept[0] += tensor.numel()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            weights = run_update(compile_layers, checkpointing=checkpointing)[1]
        return kept[0], weights

    eager_kept, eager_weights = saved_elements(False, checkpointing=True)
    graphs, breaks = compile_stats().graphs, sum(counters["graph_break"].values())
    compiled_kept, compiled_weights = saved_elements(True, checkpointing=True)
    # the layers compiled whole: a graph built, none broken (transformers' output capture under the checkpoint's
    # higher-order op would break every layer back to eager, which gives the same weights and compiles nothing)
    assert compile_stats().graphs > graphs and sum(counters["graph_break"].values()) == breaks, dict(counters["graph_break"])
    # and still recomputed in backward, so it keeps less than the same compiled update without checkpointing: where
    # transformers checkpoints outside the layer's forward (< 5.2x) the compiled layer runs inside the eager checkpoint
    # and keeps what the eager update keeps; where it checkpoints inside the forward (5.2x) the checkpoint is compiled
    # with the layer and its partitioner keeps more (transformers 5.25: 70,166 elements against eager's 9,914 and
    # 95,236 unchecked)
    unchecked_kept = saved_elements(True, checkpointing=False)[0]
    assert eager_kept <= compiled_kept < unchecked_kept, (eager_kept, compiled_kept, unchecked_kept)
    for a, b in zip(eager_weights, compiled_weights):
        torch.testing.assert_close(b, a, rtol=0, atol=TOL)


def test_a_compiled_update_takes_the_eager_optimiser_steps():
    eager, eager_weights = run_update(False)
    compiled, compiled_weights = run_update(True)
    assert compiled.keys() == eager.keys()
    for key, value in eager.items():
        assert math.isclose(compiled[key], value, rel_tol=1e-4, abs_tol=1e-6), key
    for a, b in zip(eager_weights, compiled_weights):
        torch.testing.assert_close(b, a, rtol=0, atol=TOL)


SETTINGS = ["ratio=25", "refresh=2", "trainer.steps=4", "trainer.save_every=2", "trainer.compile=true"]


@pytest.mark.slow
def test_a_compiled_run_matches_the_eager_run_and_resumes_exactly(tmp_path, model_cache):
    # each command in a process of its own: the compiler's counts of graphs are the process's
    reference, args = reference_run(tmp_path / "runs", model_cache, SETTINGS, process=True)
    tsctl("train", *args, "trainer.compile=false", "name=eager", process=True)
    compiled, eager = stable_metrics(reference), stable_metrics(tmp_path / "runs" / "default" / "eager")
    steps = [r for r in compiled if r["step"] >= 1]
    assert [r["compile/graphs"] for r in steps] == [1] * len(steps)  # one graph for every micro-batch of the run
    records = json.loads((reference / "metrics.jsonl").read_text().splitlines()[1])
    assert records["time/compile"] > 0 and records["time/update"] >= records["time/compile"]
    assert len(compiled) == len(eager)
    for c, e in zip(compiled, eager):
        assert c.keys() - {"compile/graphs"} == e.keys()
        for key, value in e.items():
            if isinstance(value, float):
                assert math.isclose(c[key], value, rel_tol=1e-3, abs_tol=1e-5), (c["step"], key, c[key], value)
            else:
                assert c[key] == value, (c["step"], key)
    kill([*args, "name=killed"], ("step-logged", 3))
    tsctl("train", *args, "name=killed", "resume=true", process=True)
    assert stable_metrics(tmp_path / "runs" / "default" / "killed") == compiled
