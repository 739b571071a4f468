"""The vllm engine against real vLLM (its CPU build in CI): sampling, log-probs, stops, prefixes, weight loads.

One engine is built for the module (``enforce_eager``: no compile warm-up) over a tiny random Qwen2
with a Qwen-style chat tokenizer; every log-prob it reports is checked against the trainer's own
forward of the same tokens. Skipped where vLLM is not installed or finds no device it can run on.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fakes.qwen import save_qwen_folder
from tsctl.config.errors import ConfigError
from tsctl.engines import vllm_platform
from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.factory import build_engine
from tsctl.engines.sampling import top_p_filter
from tsctl.engines.vllm import VLLMEngine
from tsctl.models.prompts import PromptFormatter
from tsctl.runconfig import compose_config

pytestmark = pytest.mark.vllm

GAP = 1e-4
"""Largest |engine - trainer| log-prob gap accepted in float32."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random Qwen2 (head_dim 32, vLLM's CPU attention's smallest) with a tied LM head."""
    return save_qwen_folder(tmp_path_factory.mktemp("qwen"), head_dim=32)


@pytest.fixture(scope="module")
def policy(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, PromptFormatter(AutoTokenizer.from_pretrained(folder), True, model.generation_config)


@pytest.fixture(scope="module")
def engine(folder, policy) -> VLLMEngine:
    model, formatter = policy
    cfg = compose_config(["engine=vllm", "engine.vllm.enforce_eager=true", "engine.batch_size=64", "seed=3"]).cfg
    built = build_engine(cfg.engine, model, formatter.end_ids, formatter.pad_id, str(folder), seed=cfg.seed)
    yield built
    built.load_weights(model.state_dict())  # as the module found it


def reference(model, rows: list[tuple[list[int], list[int]]], params: SamplingParams) -> list[torch.Tensor]:
    """The trainer's log-probs of each row's generated tokens [n] after its context, under the sampling
    distribution (logits / temperature, then the top-p nucleus renormalised)."""
    out = []
    for context, tokens in rows:
        ids = torch.tensor([context + tokens])
        with torch.no_grad():
            logits = model(ids).logits[0, len(context) - 1 : -1].float() / params.temperature
        if params.top_p < 1:
            logits = top_p_filter(logits, params.top_p)
        out.append(logits.log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0])
    return out


def max_gap(model, requests: list[Request], completions, params: SamplingParams) -> float:
    rows = [([*r.prompt_ids, *r.prefix_ids], c.token_ids) for r, c in zip(requests, completions)]
    refs = reference(model, rows, params)
    return max(float((torch.tensor(c.logprobs) - ref).abs().max()) for c, ref in zip(completions, refs))


def requests_for(formatter, count: int = 12) -> list[Request]:
    """Chat prompts, every third continued from a 5-token prefix (a seeded request)."""
    prompts = [formatter.prompt_ids(f"{i} + {2 * i} = ?") for i in range(count)]
    return [Request(p, (65 + i % 26, 66, 67, 68, 69) if i % 3 == 0 else ()) for i, p in enumerate(prompts)]


def test_the_settings_vllm_gets_on_this_machine(engine, tmp_path):
    assert vllm_platform.importable()
    if not vllm_platform.on_cuda():
        assert engine.dtype == torch.float32 and not engine.sleep_mode  # null settings resolved for the CPU
        small = AutoModelForCausalLM.from_pretrained(save_qwen_folder(tmp_path, head_dim=8))
        with pytest.raises(ConfigError, match="vLLM's CPU attention takes head sizes 32, .*this model's is 8: use engine=hf"):
            vllm_platform.check_model_runs_here(small.config)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.9)])
def test_engine_logprobs_are_the_trainers_within_float_rounding(engine, policy, temperature, top_p):
    model, formatter = policy
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=24)
    requests = requests_for(formatter)
    completions = engine.generate(requests, params)
    assert [len(c.token_ids) for c in completions] == [len(c.logprobs) for c in completions]
    assert max_gap(model, requests, completions, params) <= GAP


def test_samples_stop_at_the_end_tokens_or_at_their_limit(engine, policy):
    model, formatter = policy
    params = SamplingParams(temperature=1.0, max_new_tokens=48)
    requests = requests_for(formatter, 64)
    completions = engine.generate(requests, params)
    ends = set(formatter.end_ids)
    finished = [c for c in completions if c.finished]
    assert finished and len(finished) < len(completions)  # a near-uniform model stops in about a third of 48 tokens
    for request, c in zip(requests, completions):
        assert not ends & set(c.token_ids[:-1])  # nothing sampled past an end token
        if c.finished:
            assert c.token_ids[-1] in ends
        else:
            assert len(c.token_ids) == request.token_limit(params) == 48


def test_a_request_longer_than_max_model_len_is_refused(engine, policy):
    _, formatter = policy
    long = Request(list(range(200)), (1, 2, 3), max_new_tokens=60)
    with pytest.raises(ValueError, match="engine.vllm.max_model_len"):
        engine.generate([long], SamplingParams(max_new_tokens=60))


def perturbed(folder, scale: float) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator))
    assert model.lm_head.weight is model.model.embed_tokens.weight  # the tied head changes with the embedding
    return model


def test_loaded_weights_are_what_the_engine_samples_from_tied_head_included(engine, policy, folder):
    model, formatter = policy
    new = perturbed(folder, 0.2)
    params = SamplingParams(temperature=1.0, max_new_tokens=16)
    requests = requests_for(formatter, 6)
    engine.load_weights(new.state_dict())
    completions = engine.generate(requests, params)
    assert max_gap(new, requests, completions, params) <= GAP
    assert max_gap(model, requests, completions, params) > 0.5  # far from the old weights
    engine.load_weights(model.state_dict())
    back = engine.generate(requests, params)
    assert max_gap(model, requests, back, params) <= GAP


def test_a_cached_prompt_sampled_after_a_load_follows_the_new_weights(engine, policy, folder):
    model, formatter = policy
    prompt = [(7 * i) % 250 for i in range(180)]  # many KV blocks long: cached after its first request
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    request = [Request(prompt)]
    first = engine.generate(request, params)
    assert max_gap(model, request, first, params) <= GAP
    new = perturbed(folder, 0.2)
    engine.load_weights(new.state_dict())
    again = engine.generate(request, params)
    assert max_gap(new, request, again, params) <= GAP
    engine.load_weights(model.state_dict())


def test_weights_under_wrapper_names_load_as_the_folders(engine, policy, folder):
    model, formatter = policy
    new = perturbed(folder, 0.2)
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    requests = requests_for(formatter, 3)
    engine.load_weights({f"_orig_mod.{name}": tensor for name, tensor in new.state_dict().items()})  # a torch.compile'd model's names
    assert max_gap(new, requests, engine.generate(requests, params), params) <= GAP
    engine.load_weights(model.state_dict())
