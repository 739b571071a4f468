"""``policy_update``: near-equal mini-batches covering every row, micro-batch invariance, the first
mini-batch on-policy, and the k3 KL penalty kept off seed-prefix tokens."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.forward import Forward
from tsctl.models.samples import PREFIX, Sample
from tsctl.algo.objective import Objective
from tsctl.trainer import update as update_module
from update_context import update, update_context

PAD = 0


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=40, max_position_embeddings=128, pad_token_id=PAD, eos_token_id=2, bos_token_id=1,
    )
    return LlamaForCausalLM._from_config(config, attn_implementation="sdpa")


def rows(count: int, prefix: bool = False) -> list[Sample]:
    """``count`` samples over three prompts with responses of 1 to 4 tokens (every third seeded when ``prefix``)."""
    out = []
    for i in range(count):
        seeded = prefix and i % 3 == 0
        out.append(Sample(
            group=i % 3, prompt_id=f"p{i % 3}", prompt_ids=[3 + i % 3, 7, 9], generated_ids=[10 + (i * 7 + j) % 25 for j in range(1 + i % 4)],
            generated_logprobs=[0.0] * (1 + i % 4), finished=True,
            prefix_ids=[30 + i % 5, 31] if seeded else [], prefix_logprobs=[-2.5, -3.0] if seeded else [],
        ))
    return out


def config(mini_batches: int, micro: int = 0, **algo) -> TsctlConfig:
    cfg = TsctlConfig()
    cfg.engine.temperature = 1.0  # as the recomputed pi_old below
    cfg.trainer.mini_batches, cfg.trainer.micro_batch_size, cfg.trainer.max_grad_norm = mini_batches, micro, 0.0
    for key, value in algo.items():
        setattr(cfg.algo, key, value)
    return cfg


class RecordingSGD(torch.optim.SGD):
    """SGD that keeps a copy of the gradients of every step it takes."""

    def __init__(self, params, lr: float) -> None:
        super().__init__(params, lr=lr)
        self.grads: list[list[torch.Tensor]] = []

    def step(self, closure=None):
        self.grads.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for g in self.param_groups for p in g["params"]])
        return super().step(closure)


def run_update(model, batch, cfg, lr=0.0, old=None, ref=None, step=0):
    """One ``policy_update``; returns its metrics, the optimiser (with its recorded gradients) and the token normalisers used."""
    optimizer = RecordingSGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    if old is None:
        old = pi_b_on_prefix(Forward(1.0).recompute(model, batch)[0], batch)
    metrics = update(update_context(cfg, model, optimizer, scheduler), batch, old, ref, step=step)
    return metrics, optimizer


@pytest.fixture
def norms(monkeypatch) -> list[float]:
    """The token normaliser of every mini-batch ``policy_update`` runs, in order."""
    seen: list[float] = []
    original = update_module.loss_norms

    def recording(mask):
        found = original(mask)
        seen.append(float(found.tokens))
        return found

    monkeypatch.setattr(update_module, "loss_norms", recording)
    return seen


def weighted_sum(grads: list[list[torch.Tensor]], weights: list[float]) -> list[torch.Tensor]:
    return [sum(w * g[k] for g, w in zip(grads, weights)) for k in range(len(grads[0]))]


def test_a_batch_that_does_not_divide_uses_every_row_exactly_once(norms):
    # 10 rows in 4 mini-batches: 3, 3, 2, 2 rows. With lr 0 the weights stay put, so each mini-batch's
    # gradient is its tokens' summed gradient over its own normaliser: normaliser x gradient, summed over
    # the mini-batches, is every token's gradient counted once, i.e. the one-mini-batch update's.
    model = tiny_model()
    batch = collate(rows(10), torch.linspace(-1, 1, 10), PAD)
    old = pi_b_on_prefix(Forward(1.0).recompute(model, batch)[0] - 0.1, batch)
    _, split = run_update(model, batch, config(4), old=old)
    split_norms = list(norms)
    _, whole = run_update(model, batch, config(1), old=old)
    assert len(split.grads) == 4 and sum(split_norms) == norms[-1] == int(batch.resp_mask.sum())
    for a, b in zip(weighted_sum(split.grads, split_norms), weighted_sum(whole.grads, [norms[-1]])):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_the_split_is_near_equal_and_equals_the_even_split_when_it_divides(monkeypatch):
    sizes: list[int] = []
    original = update_module.loss_norms
    monkeypatch.setattr(update_module, "loss_norms", lambda mask: (sizes.append(mask.shape[0]), original(mask))[1])
    model = tiny_model()
    run_update(model, collate(rows(10), torch.linspace(-1, 1, 10), PAD), config(4))
    run_update(model, collate(rows(12), torch.linspace(-1, 1, 12), PAD), config(4))
    assert sizes == [3, 3, 2, 2, 3, 3, 3, 3]


def test_fewer_rows_than_mini_batches_take_one_row_each(norms):
    model = tiny_model()
    batch = collate(rows(3), torch.tensor([1.0, -1.0, 0.5]), PAD)
    metrics, optimizer = run_update(model, batch, config(4))
    assert len(optimizer.grads) == 3 and len(norms) == 3
    assert sum(norms) == int(batch.resp_mask.sum())
    assert metrics.means()["grad_norm"] > 0


@pytest.mark.parametrize("mini_batches", [1, 3])
def test_micro_batches_do_not_change_any_mini_batch_gradient(mini_batches):
    model = tiny_model()
    batch = collate(rows(9, prefix=True), torch.linspace(-1, 1, 9), PAD)
    old = pi_b_on_prefix(Forward(1.0).recompute(model, batch)[0] - 0.2, batch)
    _, whole = run_update(model, batch, config(mini_batches, micro=0), old=old)
    for micro in (1, 2):
        _, split = run_update(model, batch, config(mini_batches, micro=micro), old=old)
        for step_a, step_b in zip(whole.grads, split.grads, strict=True):
            for a, b in zip(step_a, step_b):
                torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_ratio_is_one_on_the_first_mini_batch_only(monkeypatch):
    ratios: list[torch.Tensor] = []
    original = Objective.loss

    def recording(self, tokens, norms):
        loss = original(self, tokens, norms)
        ratios.append(loss.tokens["ratio"][tokens.mask])
        return loss

    monkeypatch.setattr(Objective, "loss", recording)
    model = tiny_model()
    batch = collate(rows(10), torch.linspace(-1, 1, 10), PAD)
    run_update(model, batch, config(3), lr=0.5)
    assert len(ratios) == 3
    # pi_theta is pi_old: 1 up to the rounding of a forward over other rows (bit for bit with some)
    torch.testing.assert_close(ratios[0], torch.ones_like(ratios[0]), atol=1e-6, rtol=0)
    assert (ratios[1] - 1).abs().max() > 1e-3  # later mini-batches see the weights move


def test_the_k3_penalty_leaves_prefix_tokens_out():
    # Advantages 0: the policy term has no gradient. The reference equals pi_old (= pi_theta at lr 0)
    # everywhere but on prefix tokens, where it is far off: any KL gradient would come from them.
    model = tiny_model()
    batch = collate(rows(9, prefix=True), torch.zeros(9), PAD)
    pi_old = Forward(1.0).recompute(model, batch)[0]
    prefix = batch.source == PREFIX
    assert int(prefix.sum()) == 6
    ref = torch.where(prefix, pi_old - 2.0, pi_old)
    metrics, _ = run_update(model, batch, config(1, kl_coef=1.0), old=pi_b_on_prefix(pi_old, batch), ref=ref)
    means = metrics.means()
    assert means["grad_norm"] < 1e-4
    assert means["kl_ref/max"] < 1e-6
    # the same gap on one suffix token instead: the penalty is there
    suffix = (batch.source != PREFIX) & batch.resp_mask
    first = suffix.nonzero()[0]
    ref_suffix = pi_old.clone()
    ref_suffix[first[0], first[1]] -= 2.0
    metrics, _ = run_update(model, batch, config(1, kl_coef=1.0), old=pi_b_on_prefix(pi_old, batch), ref=ref_suffix)
    assert metrics.means()["grad_norm"] > 1e-3
    # k3 at d = ref - logp = -2: exp(-2) + 2 - 1
    assert metrics.means()["kl_ref/max"] == pytest.approx(torch.tensor(-2.0).exp().item() + 1.0, rel=1e-4)
