"""Sharing each prompt's forward among its rows: same log-probs, entropies and gradients as whole rows."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from tsctl.models.batch import collate
from tsctl.models.logits import logits_head
from tsctl.models.forward import Forward
from tsctl.models.logprobs import response_logprobs, token_stats
from tsctl.models.samples import Sample
from tsctl.models.shared_prompts import can_share_prompts, prompt_groups

PAD = 0


def tiny_model(attention: str = "sdpa", family: str = "llama") -> LlamaForCausalLM | Qwen2ForCausalLM:
    torch.manual_seed(0)
    model_class, config_class = {"llama": (LlamaForCausalLM, LlamaConfig), "qwen2": (Qwen2ForCausalLM, Qwen2Config)}[family]
    config = config_class(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=40, max_position_embeddings=128, pad_token_id=PAD, eos_token_id=2, bos_token_id=1,
    )
    return model_class._from_config(config, attn_implementation=attention)


def sample(prompt: list[int], generated: list[int], prefix: list[int] = ()) -> Sample:
    return Sample(
        group=0, prompt_id="p", prompt_ids=list(prompt), generated_ids=list(generated),
        generated_logprobs=[0.0] * len(generated), finished=True, prefix_ids=list(prefix),
        prefix_logprobs=[-1.0] * len(prefix),
    )


# Three prompts of different lengths, each with rows of different response lengths (one seeded).
BATCH = [
    sample([5, 6, 7], [8, 9, 10, 11]), sample([5, 6, 7], [12]), sample([5, 6, 7], [13, 14], prefix=[15, 16]),
    sample([20, 21, 22, 23, 24, 25], [26, 27, 28]), sample([20, 21, 22, 23, 24, 25], [29, 30, 31, 32, 33, 34]),
    sample([3, 4], [35, 36]), sample([3, 4], [37]), sample([3, 4], [38, 39, 9, 10, 11]),
]


def batch_of(samples: list[Sample]):
    return collate(samples, torch.linspace(-1, 1, len(samples)), PAD)


def logprobs_and_grads(model, batch, share: bool):
    model.zero_grad()
    logprobs, entropy = response_logprobs(model, batch, temperature=0.7, with_entropy=True, share_prompts=share)
    weights = torch.linspace(0.5, 1.5, logprobs.numel()).view_as(logprobs)
    ((logprobs * weights + entropy) * batch.resp_mask).sum().backward()
    return logprobs.detach(), entropy.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("attention, family", [("sdpa", "llama"), ("eager", "llama"), ("sdpa", "qwen2")])
def test_shared_prompts_give_the_same_logprobs_entropies_and_gradients(attention, family):
    model = tiny_model(attention, family).train()
    batch = batch_of(BATCH)
    shared = logprobs_and_grads(model, batch, share=True)
    whole = logprobs_and_grads(model, batch, share=False)
    mask = batch.resp_mask
    torch.testing.assert_close(shared[0][mask], whole[0][mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared[1][mask], whole[1][mask], atol=1e-5, rtol=1e-5)
    for a, b in zip(shared[2], whole[2]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_each_distinct_prompt_but_its_last_token_runs_once(monkeypatch):
    model = tiny_model()
    logits_head(model)  # the one-time check of the LM head runs its own probe forward first
    shapes: list[tuple[int, int]] = []
    model.get_decoder().register_forward_pre_hook(lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    batch = batch_of(BATCH)
    with torch.no_grad():
        response_logprobs(model, batch)
    assert shapes == [(3, 5), (8, batch.resp_mask.shape[1])]  # contexts: 3 prompts, the longest has 6 - 1 tokens


def test_the_forward_counts_contexts_once_and_every_continuation():
    model, batch = tiny_model(), batch_of(BATCH)
    # Contexts: (3 - 1) + (6 - 1) + (2 - 1) = 8; continuations: the responses' 4+1+4+3+6+2+1+5 = 26 tokens.
    assert token_stats(model, batch).tokens == 8 + 26
    # Whole rows: prompt + response of each, 7+4+7+9+12+4+3+7.
    assert token_stats(model, batch, share_prompts=False).tokens == int(batch.attention_mask.sum()) == 53


def test_prompt_groups_index_rows_by_prompt():
    ids = torch.tensor([[5, 6, 7, 1], [3, 4, 9, 0], [5, 6, 7, 2], [5, 6, 1, 1]])
    prompts, group = prompt_groups(ids, torch.tensor([3, 2, 3, 2]))
    assert prompts == [(5, 6, 7), (3, 4), (5, 6)] and group.tolist() == [0, 1, 0, 2]


def test_sharing_is_skipped_where_it_cannot_apply_or_saves_nothing():
    model = tiny_model()
    assert can_share_prompts(model, [(1, 2), (3, 4)], rows=4)
    assert not can_share_prompts(model, [(1, 2), (3, 4)], rows=2)  # every row its own prompt
    assert not can_share_prompts(model, [(1,), (3, 4)], rows=4)  # a one-token prompt has no context
    model.config._attn_implementation = "flash_attention_2"
    assert not can_share_prompts(model, [(1, 2), (3, 4)], rows=4)
    # One-token prompts still get correct log-probs (whole rows).
    one_token = batch_of([sample([5], [8, 9]), sample([5], [10])])
    with torch.no_grad():
        model.config._attn_implementation = "sdpa"
        lp, _ = response_logprobs(model, one_token)
        logits = model(one_token.input_ids[:1, :3]).logits[0, :2].log_softmax(-1)
    torch.testing.assert_close(lp[0], logits.gather(1, torch.tensor([[8], [9]])).squeeze(1))


def test_recompute_in_micro_batches_equals_whole_rows():
    model = tiny_model().eval()
    batch = batch_of(BATCH)
    shared, shared_entropy = Forward(1.0, micro_batch_size=3).recompute(model, batch)
    whole, whole_entropy = Forward(1.0, micro_batch_size=0, share_prompts=False).recompute(model, batch)
    torch.testing.assert_close(shared[batch.resp_mask], whole[batch.resp_mask], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared_entropy[batch.resp_mask], whole_entropy[batch.resp_mask], atol=1e-5, rtol=1e-5)
