"""The hf engine against the model it wraps: lengths, log-probs, greedy, EOS, seeds, order, prefixes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import Cache

from tsctl.config.schema import EngineConfig
from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.decode_attention import decode_attention
from tsctl.engines.factory import build_engine
from tsctl.engines.hf import HFEngine
from tsctl.engines.sampling import inverse_cdf_sample, top_p_filter

PAD, EOS, VOCAB = 0, 2, 50
PROMPTS = [[5, 9, 11], [7, 3, 8, 21, 30, 4, 17], [12], [40, 41, 42, 43, 44]]


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=128,
        pad_token_id=PAD, eos_token_id=EOS, bos_token_id=1,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return tiny_model()


def teacher_forced_logits(model: LlamaForCausalLM, request: Request, generated: list[int]) -> torch.Tensor:
    """Logits [G, V] predicting each generated token from prompt + prefix + earlier generated tokens."""
    context = list(request.prompt_ids) + list(request.prefix_ids)
    ids = torch.tensor([context + generated])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    return logits[len(context) - 1 : len(context) - 1 + len(generated)]


def assert_logprobs_match(model, requests, completions, temperature=1.0, top_p=1.0) -> None:
    for request, completion in zip(requests, completions):
        logits = teacher_forced_logits(model, request, completion.token_ids) / temperature
        if top_p < 1:
            logits = top_p_filter(logits, top_p)
        expected = logits.log_softmax(-1).gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)


def greedy_reference(model: LlamaForCausalLM, prompt: list[int], steps: int, eos: int) -> list[int]:
    """Argmax continuation by full forwards without a cache, stopping after EOS."""
    ids, out = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            token = int(model(torch.tensor([ids])).logits[0, -1].argmax())
            ids.append(token)
            out.append(token)
            if token == eos:
                break
    return out


def test_the_engine_serves_the_positions_the_model_was_built_for_or_its_window(model, monkeypatch):
    assert HFEngine(model, EOS, PAD).context_length == model.config.max_position_embeddings == 128
    monkeypatch.setattr(model.config, "sliding_window", 64, raising=False)  # a Mistral-like window, which the engine refuses to pass
    assert HFEngine(model, EOS, PAD).context_length == 64


def test_n_samples_per_prompt_have_right_lengths(model):
    requests = [Request(p) for p in PROMPTS for _ in range(3)]
    completions = HFEngine(model, EOS, PAD).generate(requests, SamplingParams(max_new_tokens=6, seed=1))
    assert len(completions) == len(requests)
    for group in range(len(PROMPTS)):
        assert len({tuple(c.token_ids) for c in completions[3 * group : 3 * group + 3]}) > 1
    for c in completions:
        assert len(c.token_ids) == len(c.logprobs)
        if c.finished:
            assert c.token_ids[-1] == EOS and EOS not in c.token_ids[:-1] and len(c.token_ids) <= 6
        else:
            assert len(c.token_ids) == 6 and EOS not in c.token_ids


@pytest.mark.parametrize("batch_size", [3, 256])
def test_logprobs_match_teacher_forcing_with_padding_and_prefixes(model, batch_size):
    requests = [Request(p) for p in PROMPTS] + [
        Request(PROMPTS[0], (6, 7, 8, 9)), Request(PROMPTS[1], (33,)), Request(PROMPTS[2], (3, 4)),
    ] * 2
    completions = HFEngine(model, EOS, PAD, batch_size).generate(requests, SamplingParams(max_new_tokens=12, seed=3))
    assert_logprobs_match(model, requests, completions)


def test_logprobs_follow_temperature_and_top_p(model):
    requests = [Request(p, (4,)) for p in PROMPTS] * 2
    params = SamplingParams(temperature=0.7, top_p=0.8, max_new_tokens=10, seed=5)
    completions = HFEngine(model, EOS, PAD).generate(requests, params)
    assert_logprobs_match(model, requests, completions, temperature=0.7, top_p=0.8)


def test_early_finished_rows_leave_the_others_unchanged(model, monkeypatch):
    # Flat sampling over the vocabulary makes EOS frequent, so rows finish early and are dropped in rounds.
    kept_rows: list[int] = []
    reorder = Cache.reorder_cache
    monkeypatch.setattr(Cache, "reorder_cache", lambda self, rows: (kept_rows.append(len(rows)), reorder(self, rows)))
    requests = [Request(p) for p in PROMPTS] * 8
    completions = HFEngine(model, EOS, PAD).generate(requests, SamplingParams(temperature=3.0, max_new_tokens=60))
    assert any(0 < n <= len(requests) // 2 for n in kept_rows)
    assert any(c.finished for c in completions) and any(not c.finished for c in completions)
    assert_logprobs_match(model, requests, completions, temperature=3.0)


def entropy_of(logits: torch.Tensor) -> torch.Tensor:
    logp = logits.log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def test_entropies_of_generated_and_prefix_tokens_match_teacher_forcing(model):
    requests = [Request(p) for p in PROMPTS] + [Request(PROMPTS[0], (6, 7, 8, 9)), Request(PROMPTS[1], (33,)), Request(PROMPTS[3], (3, 4))]
    params = SamplingParams(temperature=0.7, top_p=0.8, max_new_tokens=10, seed=6)
    completions = HFEngine(model, EOS, PAD, batch_size=4).generate(requests, params)
    for request, completion in zip(requests, completions):
        # Entropy of the tempered distribution before the nucleus cut, at every generated token.
        logits = teacher_forced_logits(model, request, completion.token_ids) / 0.7
        torch.testing.assert_close(torch.tensor(completion.entropies), entropy_of(logits), atol=1e-4, rtol=0)
        # The prefix, teacher-forced after the prompt.
        prefix = list(request.prefix_ids)
        logits = teacher_forced_logits(model, Request(request.prompt_ids), prefix) / 0.7
        assert len(completion.prefix_entropies) == len(prefix)
        torch.testing.assert_close(torch.tensor(completion.prefix_entropies), entropy_of(logits), atol=1e-4, rtol=0)


def test_greedy_entropies_are_the_models_own(model):
    request = Request(PROMPTS[1], (5, 6))
    completion = HFEngine(model, EOS, PAD).generate([request], SamplingParams(temperature=0, max_new_tokens=6))[0]
    logits = teacher_forced_logits(model, request, completion.token_ids)
    torch.testing.assert_close(torch.tensor(completion.entropies), entropy_of(logits), atol=1e-4, rtol=0)
    assert max(completion.logprobs) <= 0 and len(completion.prefix_entropies) == 2


def test_a_requests_own_limit_stops_its_row_only(model):
    free_run = greedy_reference(model, PROMPTS[1], 9, eos=-1)
    engine = HFEngine(model, -1, PAD)
    params = SamplingParams(temperature=0, max_new_tokens=9)
    short, capped, full = engine.generate(
        [Request(PROMPTS[1], max_new_tokens=3), Request(PROMPTS[1], max_new_tokens=50), Request(PROMPTS[1])], params
    )
    assert short.token_ids == free_run[:3] and not short.finished and len(short.entropies) == 3
    assert capped.token_ids == full.token_ids == free_run
    # A limit that ends before a row's EOS leaves it unfinished; rows that stop early are dropped.
    requests = [Request(p, max_new_tokens=2 + i % 5) for i, p in enumerate(PROMPTS * 6)]
    completions = engine.generate(requests, SamplingParams(temperature=3.0, max_new_tokens=40, seed=1))
    assert [len(c.token_ids) for c in completions] == [r.max_new_tokens for r in requests]
    assert_logprobs_match(model, requests, completions, temperature=3.0)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        engine.generate([Request(PROMPTS[0], max_new_tokens=0)], params)


def test_greedy_is_argmax_and_equals_generate(model):
    engine = HFEngine(model, EOS, PAD, batch_size=2)
    completions = engine.generate([Request(p) for p in PROMPTS], SamplingParams(temperature=0, max_new_tokens=8))
    for prompt, completion in zip(PROMPTS, completions):
        assert completion.token_ids == greedy_reference(model, prompt, 8, EOS)
        generated = model.generate(
            torch.tensor([prompt]), do_sample=False, max_new_tokens=8, eos_token_id=EOS, pad_token_id=PAD
        )[0, len(prompt) :].tolist()
        assert completion.token_ids == generated[: len(completion.token_ids)]


def test_eos_finishes_a_row_and_max_new_tokens_does_not(model):
    free_run = greedy_reference(model, PROMPTS[1], 8, eos=-1)
    eos = free_run[2]
    never = next(t for t in range(3, VOCAB) if t not in free_run)
    params = SamplingParams(temperature=0, max_new_tokens=8)
    stopped = HFEngine(model, eos, PAD).generate([Request(PROMPTS[1])], params)[0]
    assert stopped.finished and stopped.token_ids == free_run[: free_run.index(eos) + 1]
    cut = HFEngine(model, never, PAD).generate([Request(PROMPTS[1])], params)[0]
    assert not cut.finished and cut.token_ids == free_run


def test_same_seed_same_samples_other_seed_other_samples(model):
    engine = HFEngine(model, EOS, PAD)
    requests = [Request(p) for p in PROMPTS for _ in range(4)]
    first = engine.generate(requests, SamplingParams(max_new_tokens=10, seed=7))
    again = engine.generate(requests, SamplingParams(max_new_tokens=10, seed=7))
    other = engine.generate(requests, SamplingParams(max_new_tokens=10, seed=8))
    assert first == again
    assert [c.token_ids for c in first] != [c.token_ids for c in other]


def test_tiny_top_p_is_greedy(model):
    engine = HFEngine(model, EOS, PAD)
    requests = [Request(p) for p in PROMPTS]
    greedy = engine.generate(requests, SamplingParams(temperature=0, max_new_tokens=8))
    nucleus = engine.generate(requests, SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=8, seed=4))
    assert [c.token_ids for c in nucleus] == [c.token_ids for c in greedy]
    assert all(lp == 0.0 for c in nucleus for lp in c.logprobs)


def test_request_order_survives_sorting_and_chunking(model):
    requests = [Request(p, prefix) for p in reversed(PROMPTS) for prefix in ((), (9,), (9, 10, 11))]
    params = SamplingParams(temperature=0, max_new_tokens=5)
    chunked = HFEngine(model, EOS, PAD, batch_size=2).generate(requests, params)
    for request, completion in zip(requests, chunked):
        alone = HFEngine(model, EOS, PAD).generate([request], params)[0]
        assert completion.token_ids == alone.token_ids
        torch.testing.assert_close(completion.logprobs, alone.logprobs, atol=1e-5, rtol=0)


def test_prefix_continues_where_the_prompt_left_off(model):
    free_run = greedy_reference(model, PROMPTS[3], 9, eos=-1)
    engine = HFEngine(model, -1, PAD)
    params = SamplingParams(temperature=0, max_new_tokens=5)
    plain = engine.generate([Request(PROMPTS[3])], params)[0]
    seeded = engine.generate([Request(PROMPTS[3], tuple(free_run[:4]))], params)[0]
    assert plain.token_ids == free_run[:5]
    assert seeded.token_ids == free_run[4:9]


def test_prefixes_are_forced_in_the_decode_loop_after_one_prefill_per_prompt(model, monkeypatch):
    # Seeded and plain rows of a prompt share its prefill; prefixes are fed one token per decode step.
    prefill_shapes: list[tuple[int, int]] = []
    forward = HFEngine._forward

    def recording_forward(self, ids, *args, **kwargs):
        if ids.shape[1] > 1:
            prefill_shapes.append(tuple(ids.shape))
        return forward(self, ids, *args, **kwargs)

    monkeypatch.setattr(HFEngine, "_forward", recording_forward)
    free_run = greedy_reference(model, PROMPTS[1], 8, eos=-1)
    requests = [Request(PROMPTS[1]), Request(PROMPTS[1], tuple(free_run[:3]), max_new_tokens=5), Request(PROMPTS[0])]
    plain, seeded, other = HFEngine(model, -1, PAD).generate(requests, SamplingParams(temperature=0, max_new_tokens=8))
    assert prefill_shapes == [(2, len(PROMPTS[1]))]
    assert plain.token_ids == free_run and seeded.token_ids == free_run[3:] and len(other.token_ids) == 8
    assert len(seeded.prefix_entropies) == 3 and seeded.prefix_entropies == pytest.approx(plain.entropies[:3], abs=1e-5)


def test_an_eos_inside_a_prefix_does_not_stop_the_row(model):
    request = Request(PROMPTS[0], (EOS, 9, EOS), max_new_tokens=4)
    completion = HFEngine(model, -1, PAD).generate([request], SamplingParams(temperature=0, max_new_tokens=6))[0]
    assert len(completion.token_ids) == 4 and len(completion.prefix_entropies) == 3
    assert completion.token_ids == greedy_reference(model, list(PROMPTS[0]) + [EOS, 9, EOS], 4, eos=-1)


def test_a_request_without_prompt_is_refused(model):
    with pytest.raises(ValueError, match="at least one prompt token"):
        HFEngine(model, EOS, PAD).generate([Request((), (5, 6))], SamplingParams())


def test_load_weights_copies_and_rejects_mismatches(model):
    other = tiny_model(seed=1)
    engine = HFEngine(tiny_model(seed=2), EOS, PAD)
    state = {k: v for k, v in other.state_dict().items()}
    engine.load_weights(state)
    requests = [Request(p) for p in PROMPTS]
    params = SamplingParams(temperature=0, max_new_tokens=6)
    assert engine.generate(requests, params) == HFEngine(other, EOS, PAD).generate(requests, params)
    with pytest.raises(KeyError, match="unexpected"):
        engine.load_weights({**state, "extra.weight": torch.zeros(1)})
    with pytest.raises(KeyError, match="missing"):
        engine.load_weights({k: v for k, v in state.items() if "layers.0." not in k})


def test_inverse_cdf_sampling_follows_the_probabilities():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2]]).expand(20000, 4)
    draws = inverse_cdf_sample(probs, torch.Generator().manual_seed(0))
    frequencies = torch.bincount(draws, minlength=4).float() / len(draws)
    torch.testing.assert_close(frequencies, probs[0], atol=0.015, rtol=0)


def test_factory_builds_hf_and_rejects_unknown_names(model):
    engine = build_engine(EngineConfig(name="hf", batch_size=7), model, end_ids=EOS, pad_id=PAD)
    assert isinstance(engine, HFEngine) and engine.batch_size == 7
    with pytest.raises(ValueError, match="unknown engine .sglang.; valid: hf, vllm"):
        build_engine(EngineConfig(name="sglang"), model, end_ids=EOS, pad_id=PAD)


def test_eager_attention_samples_like_sdpa_and_other_kernels_are_refused(model):
    eager = tiny_model()
    eager.set_attn_implementation("eager")
    requests = [Request(p, (3,)) for p in PROMPTS]
    params = SamplingParams(max_new_tokens=8, seed=2)
    ours = HFEngine(eager, EOS, PAD).generate(requests, params)
    assert [c.token_ids for c in ours] == [c.token_ids for c in HFEngine(model, EOS, PAD).generate(requests, params)]
    assert_logprobs_match(model, requests, ours)
    eager.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        HFEngine(eager, EOS, PAD)


def test_decode_attention_equals_sdpa_with_grouped_heads_and_padding():
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(3, 4, 1, 8, generator=generator)
    key, value = torch.randn(2, 3, 2, 6, 8, generator=generator)  # 2 key/value heads shared by 4 query heads
    allowed = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]], dtype=torch.bool)
    mask = torch.zeros(3, 1, 1, 6).masked_fill(~allowed[:, None, None, :], torch.finfo(torch.float32).min)
    ours, weights = decode_attention(torch.nn.Module(), query, key, value, mask, scaling=0.3)
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(2, dim=1), value.repeat_interleave(2, dim=1), attn_mask=mask, scale=0.3
    ).transpose(1, 2)
    assert weights is None and ours.shape == (3, 1, 4, 8)
    torch.testing.assert_close(ours, expected, atol=1e-6, rtol=0)


def test_generate_restores_the_models_attention_even_when_it_fails(model, monkeypatch):
    engine = HFEngine(model, EOS, PAD)
    seen = []
    forward = HFEngine._forward
    monkeypatch.setattr(HFEngine, "_forward", lambda self, *a, **k: (seen.append(model.config._attn_implementation), forward(self, *a, **k))[1])
    engine.generate([Request(PROMPTS[0])], SamplingParams(max_new_tokens=3))
    assert set(seen) == {"tsctl_decode"} and model.config._attn_implementation == "sdpa"
    monkeypatch.setattr(HFEngine, "_forward", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        engine.generate([Request(PROMPTS[0])], SamplingParams(max_new_tokens=3))
    assert model.config._attn_implementation == "sdpa"


def test_rows_past_a_sliding_window_are_refused_with_the_fix():
    from transformers import MistralConfig, MistralForCausalLM

    from tsctl.config.errors import ConfigError

    config = MistralConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           num_key_value_heads=2, sliding_window=8, max_position_embeddings=64)
    engine = HFEngine(MistralForCausalLM(config), 2, 0)
    fits = engine.generate([Request(prompt_ids=[3, 4, 5], prefix_ids=[6])], SamplingParams(max_new_tokens=4, seed=1))
    assert len(fits) == 1  # 3 + 1 + 4 = 8 tokens: inside the window
    with pytest.raises(ConfigError, match="sliding window of 8 tokens.*reach 9 tokens.*engine.max_new_tokens"):
        engine.generate([Request(prompt_ids=[3, 4, 5], prefix_ids=[6])], SamplingParams(max_new_tokens=5, seed=1))


@pytest.mark.slow
def test_the_engine_throughput_bench_runs_under_autocast_and_reports_both_sides():
    script = Path(__file__).resolve().parents[1] / "bench" / "engine_throughput.py"
    cmd = [sys.executable, str(script), "--device", "cpu", "--compute-dtype", "bfloat16", "--samples", "8", "--new-tokens", "4",
           "--repeats", "1", "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "compute bfloat16, 8 sequences x 4 new tokens" in proc.stdout
    assert proc.stdout.count("ms per decode step") == 4 and proc.stdout.count("hf / model.generate") == 2
