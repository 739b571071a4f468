"""Log-probs and entropies from logits, and the chunked head: equal to the unchunked computation, without ever holding all logits."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from transformers import LlamaConfig, LlamaForCausalLM

from tsctl.models.batch import collate
from tsctl.models.logprobs import response_logprobs
from tsctl.models.samples import Sample
from tsctl.models.token_stats import chunk_positions, entropy_from_logits, head_token_stats, token_logprobs

B, T, D, V = 3, 10, 16, 5000


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an op creates."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def saved_bytes(fn) -> int:
    """Bytes of the distinct tensors autograd keeps for backward while ``fn`` runs."""
    seen: dict[int, int] = {}

    def pack_hook(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack_hook, lambda t: t):
        fn()
    return sum(seen.values())


def reference(head: torch.nn.Linear, hidden: torch.Tensor, targets: torch.Tensor, temperature: float):
    """The unchunked computation: full [B, T, V] logits."""
    logits = head(hidden).float() / temperature
    logprobs = logits.log_softmax(-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    return logprobs.gather(-1, targets[..., None])[..., 0], entropy


@pytest.fixture
def problem():
    torch.manual_seed(0)
    head = torch.nn.Linear(D, V, bias=False)
    hidden = torch.randn(B, T, D, requires_grad=True)
    targets = torch.randint(0, V, (B, T))
    return head, hidden, targets


@pytest.mark.parametrize("chunk", [7, 64, B * T])
def test_chunks_give_the_unchunked_values_and_gradients(problem, chunk):
    head, hidden, targets = problem
    weights = torch.linspace(0.5, 1.5, B * T).view(B, T)

    def grads(fn):
        head.zero_grad()
        hidden.grad = None
        logprobs, entropy = fn()
        ((logprobs * weights).sum() + entropy.sum()).backward()
        return logprobs.detach(), entropy.detach(), head.weight.grad.clone(), hidden.grad.clone()

    got = grads(lambda: head_token_stats(head, hidden, targets, 0.7, with_entropy=True, positions_per_chunk=chunk))
    want = grads(lambda: reference(head, hidden, targets, 0.7))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_no_tensor_of_all_logits_is_ever_created_and_backward_keeps_hidden_states(problem):
    head, hidden, targets = problem
    chunk = 6
    mode = LargestTensor()

    def chunked():
        logprobs, entropy = head_token_stats(head, hidden, targets, with_entropy=True, positions_per_chunk=chunk)
        (logprobs.sum() + entropy.sum()).backward()

    with mode:
        chunked_saved = saved_bytes(chunked)
    # Forward and backward: one chunk of logits at a time (the head's weight gradient is [V, D]).
    assert mode.largest <= max(chunk * V, D * V) < B * T * V
    full_saved = saved_bytes(lambda: sum(x.sum() for x in reference(head, hidden, targets, 1.0)).backward())
    assert full_saved >= B * T * V * 4  # the unchunked path keeps all logits for backward ...
    assert chunked_saved <= 2 * B * T * D * 4 + 4 * B * T * 4  # ... the chunked one its hidden states and outputs


def test_the_chunk_size_follows_the_memory_budget():
    assert chunk_positions(1, 2**18) == 1  # 1 MiB of float32 logits at a 262k vocabulary: one position
    assert chunk_positions(512, 151936) == 883  # 512 MiB at Qwen's vocabulary
    assert chunk_positions(0.001, 10) == 26


def test_response_logprobs_in_small_chunks_equal_one_chunk_without_all_logits():
    torch.manual_seed(0)
    vocab = 3000
    config = LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, vocab_size=vocab)
    model = LlamaForCausalLM(config).train()
    samples = [
        Sample(group=0, prompt_id="p", prompt_ids=[5, 6, 7], generated_ids=list(range(10, 10 + n)), generated_logprobs=[0.0] * n, finished=True)
        for n in (3, 9, 1, 6)
    ]
    batch = collate(samples, torch.zeros(4), 0)

    def run(mib: float):
        model.zero_grad()
        logprobs, entropy = response_logprobs(model, batch, 0.8, with_entropy=True, logits_chunk_mib=mib)
        ((logprobs + entropy) * batch.resp_mask).sum().backward()
        return [logprobs.detach(), entropy.detach()] + [p.grad.clone() for p in model.parameters()]

    mode = LargestTensor()
    with mode:
        small = run(5 * vocab * 4 / 2**20)  # five positions per chunk
    assert mode.largest < batch.resp_mask.numel() * vocab  # no [B, T, V] logits, forward or backward
    whole = run(512)
    for a, b in zip(small, whole):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_entropy_matches_categorical():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11) * 4
    logits[0, 0] += 50.0  # large offsets must not overflow
    want = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy_from_logits(logits[1]), want[1], atol=1e-5, rtol=1e-5)


def test_entropy_gradient_and_bf16():
    torch.manual_seed(1)
    logits = torch.randn(2, 4, 7, requires_grad=True)
    entropy_from_logits(logits).sum().backward()
    ref = logits.detach().clone().requires_grad_()
    torch.distributions.Categorical(logits=ref).entropy().sum().backward()
    torch.testing.assert_close(logits.grad, ref.grad, atol=1e-5, rtol=1e-5)
    bf = entropy_from_logits(logits.detach().bfloat16())
    assert bf.dtype == torch.float32
    torch.testing.assert_close(bf, entropy_from_logits(logits.detach().bfloat16().float()))


def test_token_logprobs_matches_log_softmax_gather():
    torch.manual_seed(0)
    full = torch.randn(3, 7, 13) * 3
    targets = torch.randint(0, 13, (3, 6))
    logits = full[:, 1:].clone().requires_grad_()
    got = token_logprobs(logits, targets)
    ref_logits = logits.detach().clone().requires_grad_()
    want = torch.log_softmax(ref_logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(logits.grad, ref_logits.grad)
    torch.testing.assert_close(token_logprobs(full[:, 1:], targets), want.detach())  # a non-contiguous slice, as when dropping the prompt
