"""The hf engine at forced prefix steps: it keeps the forced token's log-prob, never the drawn one's."""

from __future__ import annotations

import pytest
import torch
from test_engine_hf import EOS, PAD, PROMPTS, model, teacher_forced_logits  # noqa: F401 (model is a fixture)

from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.hf import HFEngine
from tsctl.engines.sampling import sample


def constructed_logits() -> torch.Tensor:
    """Two rows over 5 tokens: token 0 is almost certain, token 3 (the one forced in row 0) very unlikely."""
    return torch.tensor([[9.0, 1.0, 0.5, -4.0, 0.0], [9.0, 1.0, 0.5, -4.0, 0.0]])


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (0.7, 0.5), (0.0, 1.0)])
def test_a_forced_row_returns_the_forced_tokens_log_prob(temperature, top_p):
    logits = constructed_logits()
    params = SamplingParams(temperature=temperature, top_p=top_p)
    forced = torch.tensor([3, -1])
    tokens, logprobs, entropy = sample(logits, params, torch.Generator().manual_seed(0), forced)
    free_tokens, free_logprobs, free_entropy = sample(logits, params, torch.Generator().manual_seed(0))
    assert tokens.tolist() == [3, free_tokens[1].item()] and free_tokens[0].item() == 0
    # The forced token's log-prob under the tempered distribution before any nucleus cut (token 3 is
    # outside a 0.5 nucleus, yet its log-prob stays finite); the drawn token's is never returned.
    expected = (logits[0] / (temperature or 1.0)).log_softmax(-1)[3]
    assert logprobs[0].item() == pytest.approx(expected.item(), abs=1e-6)
    assert logprobs[0].item() != pytest.approx(free_logprobs[0].item(), abs=1e-3)
    # A sampling row is untouched, and so is the entropy.
    assert logprobs[1].item() == free_logprobs[1].item() and torch.equal(entropy, free_entropy)


def test_forcing_leaves_the_random_stream_alone():
    logits = torch.randn(3, 7)
    generator_a, generator_b = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    sample(logits, SamplingParams(), generator_a, torch.tensor([2, -1, 5]))
    sample(logits, SamplingParams(), generator_b)
    assert torch.equal(generator_a.get_state(), generator_b.get_state())


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.8)])
def test_the_engine_reports_pi_olds_log_probs_of_the_forced_prefix(model, temperature, top_p):  # noqa: F811
    # Prefix tokens chosen against the model (the least likely after the prompt), so a draw at those
    # steps would almost never be the forced token.
    with torch.no_grad():
        unlikely = int(model(torch.tensor([PROMPTS[0]])).logits[0, -1].argmin())
    requests = [Request(PROMPTS[0], (unlikely, 9, unlikely, 4)), Request(PROMPTS[1], (33,)), Request(PROMPTS[2])]
    completions = HFEngine(model, EOS, PAD).generate(requests, SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=6, seed=2))
    for request, completion in zip(requests, completions):
        prefix = list(request.prefix_ids)
        logits = teacher_forced_logits(model, Request(request.prompt_ids), prefix) / temperature
        expected = logits.log_softmax(-1).gather(1, torch.tensor(prefix, dtype=torch.long)[:, None]).squeeze(1) if prefix else torch.zeros(0)
        assert len(completion.prefix_logprobs) == len(prefix)
        torch.testing.assert_close(torch.tensor(completion.prefix_logprobs), expected, atol=1e-4, rtol=0)
