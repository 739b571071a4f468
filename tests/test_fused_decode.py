"""The fused decode step against the model's own forward, and the engine's use of it."""

from __future__ import annotations

import functools
import inspect

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.cache_utils import Cache

from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.fused_decode import FusedDecoder
from tsctl.engines.hf import HFEngine
from tsctl.engines.kv_cache import PreallocatedLayer
from tsctl.models.padding import left_pad, prefill_mask

PAD, EOS, VOCAB = 0, 2, 50
SIZES = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
    vocab_size=VOCAB, max_position_embeddings=128, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=1,
)


def build(model_class, config_class, **extra) -> torch.nn.Module:
    torch.manual_seed(0)
    model = model_class(config_class(**SIZES, **extra)).eval()
    with torch.no_grad():  # non-zero biases and norm weights, so a dropped term would show
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


MODELS = {
    "llama": lambda: build(LlamaForCausalLM, LlamaConfig),
    "llama-attention-bias": lambda: build(LlamaForCausalLM, LlamaConfig, attention_bias=True),
    "qwen2": lambda: build(Qwen2ForCausalLM, Qwen2Config),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_fused_step_equals_the_models_forward(name):
    model = MODELS[name]()
    decoder = FusedDecoder.for_model(model)
    assert decoder is not None
    prompts = [[5, 9, 11, 4], [7, 3], [12, 13, 14]]
    ids, real = left_pad(prompts, PAD, torch.device("cpu"))
    positions = (real.cumsum(1) - 1).clamp_min(0)
    caches = [Cache(layer_class_to_replicate=functools.partial(PreallocatedLayer, 10)) for _ in range(2)]
    arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"  # older transformers name it past_key_values
    with torch.no_grad():
        for cache in caches:
            model(input_ids=ids, attention_mask=prefill_mask(real, torch.float32), position_ids=positions, **{arg: cache})
        token, position = torch.tensor([3, 8, 21]), real.sum(1, keepdim=True)
        allowed = torch.cat([real, real.new_ones(3, 1)], dim=1)[:, None, None, :]
        mask = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
        expected = model(input_ids=token[:, None], attention_mask=mask, position_ids=position, **{arg: caches[0]}).logits[:, -1]
        fused = decoder.step(token, mask, position, caches[1])
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    for mine, theirs in zip(caches[1].layers, caches[0].layers):
        torch.testing.assert_close(mine.keys[:, :, : mine.length], theirs.keys[:, :, : theirs.length], atol=1e-6, rtol=1e-6)


def test_models_it_does_not_compute_exactly_are_left_to_their_forward():
    assert FusedDecoder.for_model(build(Qwen3ForCausalLM, Qwen3Config, head_dim=8)) is None  # q/k norms
    assert FusedDecoder.for_model(build(LlamaForCausalLM, LlamaConfig, hidden_act="gelu")) is None
    assert FusedDecoder.for_model(build(LlamaForCausalLM, LlamaConfig, mlp_bias=True)) is None
    sliding = Qwen2Config(**SIZES, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    assert FusedDecoder.for_model(Qwen2ForCausalLM(sliding)) is None
    assert FusedDecoder.for_model(MistralForCausalLM(MistralConfig(**SIZES, sliding_window=16))) is None
    assert FusedDecoder.for_model(MistralForCausalLM(MistralConfig(**SIZES, sliding_window=None))) is not None
    hooked = MODELS["llama"]()
    handle = hooked.model.layers[1].mlp.register_forward_hook(lambda module, args, out: out * 2)
    assert FusedDecoder.for_model(hooked) is None
    handle.remove()
    hooked.model.layers[0].self_attn.q_proj = LoraLikeLinear(32, 32, bias=False)  # an adapter wrapping a projection
    assert FusedDecoder.for_model(hooked) is None


def test_a_hook_on_the_lm_head_still_applies():
    model = MODELS["llama"]()
    model.lm_head.register_forward_hook(lambda module, args, out: out.index_fill(-1, torch.tensor([EOS]), -1e4))
    assert FusedDecoder.for_model(model) is not None
    completions = HFEngine(model, EOS, PAD).generate([Request([5, 9, 11])] * 8, SamplingParams(temperature=3.0, max_new_tokens=30))
    assert all(len(c.token_ids) == 30 and EOS not in c.token_ids for c in completions)


class LoraLikeLinear(torch.nn.Linear):
    """A subclass of Linear whose forward adds a term the weight alone does not show."""

    def forward(self, x):
        return super().forward(x) + 1.0


@pytest.mark.parametrize("model_factory", [MODELS["qwen2"], lambda: build(Qwen3ForCausalLM, Qwen3Config, head_dim=8)])
def test_the_engine_decodes_through_the_fused_step_when_it_can(model_factory, monkeypatch):
    model = model_factory()
    calls = []
    step = FusedDecoder.step

    def counted_step(self, *args):
        calls.append(1)
        return step(self, *args)

    monkeypatch.setattr(FusedDecoder, "step", counted_step)
    requests = [Request([5, 9, 11]), Request([7, 3, 8, 21], (4, 6))]
    params = SamplingParams(temperature=0.8, max_new_tokens=6, seed=3)
    completions = HFEngine(model, EOS, PAD).generate(requests, params)
    assert bool(calls) == (FusedDecoder.for_model(model) is not None)
    for request, completion in zip(requests, completions):
        context = list(request.prompt_ids) + list(request.prefix_ids)
        with torch.no_grad():
            logits = model(torch.tensor([context + completion.token_ids])).logits[0, len(context) - 1 : -1] / 0.8
        expected = logits.log_softmax(-1).gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)


def test_the_cache_buffer_doubles_up_to_its_capacity_and_keeps_what_it_holds():
    layer = PreallocatedLayer(capacity=11)
    first = torch.randn(2, 1, 3, 4)
    keys, _ = layer.update(first, first + 1)
    assert layer.size == 6 and torch.equal(keys, first)
    written = [first]
    for size in (6, 6, 6, 11, 11, 11, 11, 11):  # buffer size after each one-position write
        new = torch.randn(2, 1, 1, 4)
        written.append(new)
        keys, values = layer.update(new, new + 1)
        assert layer.size == size
        torch.testing.assert_close(keys, torch.cat(written, dim=2), rtol=0, atol=0)
        torch.testing.assert_close(values, torch.cat(written, dim=2) + 1, rtol=0, atol=0)
    assert not layer.keys[:, :, layer.length :].any()  # the tail read under the mask is zero
    layer.reorder_cache(torch.tensor([1, 1, 0]))
    assert layer.size == 11 and torch.equal(layer.keys[:, :, : layer.length], torch.cat(written, dim=2)[[1, 1, 0]])
    with pytest.raises(ValueError, match="holds 11 positions"):
        layer.update(torch.randn(3, 1, 1, 4), torch.randn(3, 1, 1, 4))
