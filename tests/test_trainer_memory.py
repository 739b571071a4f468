"""Memory knobs of the update: gradient checkpointing and token-budget micro-batches change no gradient."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.logits import logits_head
from tsctl.models.forward import Forward
from tsctl.models.logprobs import enable_activation_checkpointing, response_logprobs, token_stats
from tsctl.models.micro_batches import micro_batches
from tsctl.models.samples import Sample
from tsctl.runconfig import compose_config
from update_context import update, update_context

RESPONSES = [[8, 9, 10, 11, 12, 13], [14], [15, 16, 17], [18, 19], [20, 21, 22, 23, 24, 25, 26, 27], [28, 29, 30], [31], [32, 33, 34, 35]]


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=40, max_position_embeddings=128, pad_token_id=0, eos_token_id=2, bos_token_id=1,
    )
    return LlamaForCausalLM._from_config(config, attn_implementation="sdpa")


def batch():
    """8 rows of two prompts, responses of 1 to 8 tokens, advantages of both signs."""
    samples = [
        Sample(group=i // 4, prompt_id=str(i // 4), prompt_ids=[[5, 6, 7], [3, 4]][i // 4], generated_ids=r,
               generated_logprobs=[0.0] * len(r), finished=True)
        for i, r in enumerate(RESPONSES)
    ]
    return collate(samples, torch.linspace(-1, 1, len(samples)), 0)


def test_token_budget_packs_longest_first_within_the_budget():
    lengths = [9, 4, 6, 5, 10, 5, 3, 6]
    parts = micro_batches(torch.arange(8), lengths, max_tokens=20)
    assert sorted(i for p in parts for i in p.tolist()) == list(range(8))
    assert [p.tolist() for p in parts] == [[4, 0], [2, 7, 3], [5, 1, 6]]  # 2x10, 3x6, 3x5 tokens
    assert all(len(p) * max(lengths[i] for i in p.tolist()) <= 20 for p in parts)
    assert [p.tolist() for p in micro_batches(torch.arange(3), [30, 2, 2], max_tokens=20)] == [[0], [1, 2]]  # too long: alone
    assert [len(p) for p in micro_batches(torch.arange(8), lengths, max_rows=2, max_tokens=100)] == [2, 2, 2, 2]
    assert [p.tolist() for p in micro_batches(torch.tensor([3, 1, 2]), lengths, max_rows=2)] == [[3, 1], [2]]  # rows only: in order


def sgd_step(model, overrides: list[str]) -> list[torch.Tensor]:
    """The parameter change of one SGD step (lr 1) of policy_update: minus the mini-batch's gradient."""
    cfg = compose_config(["trainer=micro", "trainer.batch_size=2", "trainer.n=4", "trainer.mini_batches=1", "algo.entropy_coef=0.01",
                          "trainer.max_grad_norm=0", *overrides]).cfg
    b = batch()
    old, _ = Forward.of(cfg).recompute(model, b)
    old = old + 0.05 * torch.linspace(-1, 1, old.numel()).view_as(old)  # ratios away from 1: some clip
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    update(update_context(cfg, model, optimizer, scheduler), b, pi_b_on_prefix(old, b))
    delta = [p.detach() - q for p, q in zip(model.parameters(), before)]
    with torch.no_grad():
        for p, q in zip(model.parameters(), before):
            p.copy_(q)
    return delta


@pytest.mark.parametrize(
    "overrides",
    [["trainer.micro_batch_tokens=24"], ["trainer.micro_batch_tokens=1"], ["trainer.gradient_checkpointing=true"], ["trainer.share_prompts=false"]],
)
def test_the_gradient_equals_the_unsplit_full_precision_step(overrides):
    model = tiny_model()
    whole = sgd_step(model, [])
    if "trainer.gradient_checkpointing=true" in overrides:
        enable_activation_checkpointing(model)
    split = sgd_step(model, overrides)
    assert any(float(d.abs().max()) > 1e-4 for d in whole)
    for a, b in zip(split, whole):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_gradient_checkpointing_recomputes_layers_and_runs_whole_rows_only_with_grad(monkeypatch):
    model = tiny_model()
    enable_activation_checkpointing(model)
    logits_head(model)  # its one-time check runs a probe forward first
    calls = []
    mlp_class = type(model.model.layers[0].mlp)
    forward = mlp_class.forward
    monkeypatch.setattr(mlp_class, "forward", lambda self, x: calls.append(1) or forward(self, x))
    b = batch()
    model.train()
    logprobs, _ = response_logprobs(model, b)
    forward_calls = len(calls)
    (logprobs * b.resp_mask).sum().backward()
    assert forward_calls == 2 and len(calls) == 4  # one forward of whole rows (2 layers), one recompute in backward
    assert token_stats(model, b).tokens == int(b.attention_mask.sum())  # training: prompts are not shared
    model.eval()
    assert token_stats(model, b).tokens < int(b.attention_mask.sum())  # no-grad recomputes still share them
    with torch.no_grad():
        shared, _ = response_logprobs(model, b)
    torch.testing.assert_close(shared[b.resp_mask], logprobs.detach()[b.resp_mask], atol=1e-5, rtol=1e-5)


def test_recompute_under_a_token_budget_puts_rows_back_in_order():
    model = tiny_model().eval()
    b = batch()
    whole, whole_entropy = Forward(0.7).recompute(model, b)
    split, split_entropy = Forward(0.7, micro_batch_tokens=20).recompute(model, b)
    torch.testing.assert_close(split[b.resp_mask], whole[b.resp_mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(split_entropy[b.resp_mask], whole_entropy[b.resp_mask], atol=1e-5, rtol=1e-5)
