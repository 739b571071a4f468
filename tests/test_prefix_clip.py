"""The bound on seed-prefix tokens' importance weight (``algo.prefix_clip_c``, a dual clip on by default)."""

from __future__ import annotations

import math

import pytest
import torch
from test_losses import verl_vanilla_token_mean
from test_update import PAD, config, rows, run_update, tiny_model

from loss_terms import policy_term
from tsctl.algo.aggregations import loss_norms
from tsctl.algo.losses import dual_clip_bounds
from tsctl.config.errors import ConfigError
from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.forward import Forward
from tsctl.runconfig import compose_config

CLIPS = dict(clip_low=0.2, clip_high=0.28)


def dapo(logprobs, old, adv, mask, clip_c):
    token_norm, seq_norm = loss_norms(mask)
    return policy_term("dapo", logprobs, old, adv, mask, **CLIPS, clip_c=clip_c, token_norm=token_norm, seq_norm=seq_norm)


def test_a_stale_prefix_token_with_negative_advantage_is_bounded():
    # One row, A = -1. Ratios: prefix 10 (pi_theta >> pi_b), prefix 2, suffix 10.
    # Per-token loss max(-A r, -A clip(r, 0.8, 1.28)), and on prefix tokens min(., -A * 3):
    #   prefix r=10 -> min(10, 3) = 3 (zero gradient), prefix r=2 -> 2, suffix r=10 -> 10 (no dual clip).
    ratios = torch.tensor([[10.0, 2.0, 10.0]])
    old = torch.tensor([[-9.0, -2.0, -4.0]])
    logprobs = (old + ratios.log()).requires_grad_()
    prefix = torch.tensor([[True, True, False]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    bounds = dual_clip_bounds(prefix, None, 3.0)
    assert torch.equal(bounds, torch.tensor([[3.0, 3.0, math.inf]]))
    loss, m = dapo(logprobs, old, torch.tensor([-1.0]), mask, bounds)
    assert loss.item() == pytest.approx((3.0 + 2.0 + 10.0) / 3, rel=1e-6)
    loss.backward()
    # d loss / d logprob = -A r / 3 where the unclipped term is selected, 0 beyond the bound
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, 2.0 / 3, 10.0 / 3]]))
    assert m["clip_dual"].tolist() == [[1.0, 0.0, 0.0]]
    assert m["clipped"].tolist() == [[1.0, 0.0, 0.0]]
    torch.testing.assert_close(m["pg_loss"], torch.tensor([[3.0, 2.0, 10.0]]))


@pytest.mark.parametrize("ratio", [3.5, 50.0, math.exp(20.0)])
def test_the_prefix_gradient_is_zero_beyond_the_bound_whatever_the_staleness(ratio):
    old = torch.tensor([[-25.0]])
    logprobs = (old + math.log(ratio)).requires_grad_()
    loss, _ = dapo(logprobs, old, torch.tensor([-2.0]), torch.ones(1, 1, dtype=torch.bool), dual_clip_bounds(torch.ones(1, 1, dtype=torch.bool), None, 3.0))
    loss.backward()
    assert loss.item() == pytest.approx(6.0)  # -A * c
    assert logprobs.grad.item() == 0.0


def test_prefix_tokens_take_the_tighter_of_the_two_constants():
    prefix = torch.tensor([[True, False]])
    assert torch.equal(dual_clip_bounds(prefix, 2.0, 3.0), torch.tensor([[2.0, 2.0]]))
    assert torch.equal(dual_clip_bounds(prefix, 5.0, 3.0), torch.tensor([[3.0, 5.0]]))
    assert dual_clip_bounds(prefix, 2.0, None) == 2.0 and dual_clip_bounds(prefix, None, None) is None


@pytest.mark.parametrize("clip_c", [None, 1.5, 4.0])
def test_plain_tokens_keep_verls_vanilla_loss_and_prefix_tokens_its_dual_clip(clip_c):
    # Token-mean over all tokens = (sum over plain tokens + sum over prefix tokens) / N, each sum being
    # verl's vanilla loss on that subset: plain tokens with clip_c (off: 1e30), prefix tokens with
    # min(clip_c, 3).
    torch.manual_seed(0)
    b, t = 6, 9
    old = -torch.rand(b, t) * 3
    logprobs = (old + torch.randn(b, t) * 1.5).requires_grad_()
    adv = torch.randn(b)
    mask = torch.arange(t) < torch.tensor([9, 2, 5, 7, 3, 8]).unsqueeze(-1)
    prefix = (torch.arange(t) < torch.tensor([3, 0, 4, 0, 2, 5]).unsqueeze(-1)) & mask
    loss, m = dapo(logprobs, old, adv, mask, dual_clip_bounds(prefix, clip_c, 3.0))
    ref_logprobs = logprobs.detach().clone().requires_grad_()
    plain_c = 1e30 if clip_c is None else clip_c
    plain = mask & ~prefix
    ref = sum(
        verl_vanilla_token_mean(old, ref_logprobs, adv, subset, 0.2, 0.28, c)[0] * subset.sum()
        for subset, c in ((plain, plain_c), (prefix, min(plain_c, 3.0)))
    ) / mask.sum()
    torch.testing.assert_close(loss, ref)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(logprobs.grad, ref_logprobs.grad)
    f = mask.float()
    dual_prefix = (m["clip_dual"] * prefix).sum()
    assert dual_prefix > 0  # the bound is active on some prefix tokens
    if clip_c is None:
        assert (m["clip_dual"] * plain).sum() == 0 and (m["clip_dual"] * f).sum() == dual_prefix


def stale_batch():
    """Nine rows, six prefix tokens whose pi_b log-prob is -30 (pi_theta >> pi_b), every advantage -1."""
    samples = rows(9, prefix=True)
    for s in samples:
        s.prefix_logprobs = [-30.0] * len(s.prefix_ids)
    return collate(samples, -torch.ones(9), PAD)


def test_the_trainer_bounds_stale_prefix_tokens_by_default():
    model = tiny_model()
    batch = stale_batch()
    cfg = config(1)
    cfg.ratio = 25.0
    assert cfg.algo.prefix_clip_c == 3.0 and cfg.algo.clip_c is None
    old = pi_b_on_prefix(Forward(1.0).recompute(model, batch)[0], batch)
    means = run_update(model, batch, cfg, old=old)[0].means()
    assert means["pg_loss/max"] == pytest.approx(3.0)  # -A * 3 on the stale prefix tokens
    assert means["clip_dual"] == pytest.approx(6 / int(batch.resp_mask.sum()))
    assert means["clipped_by_source/prefix"] == 1.0 and means["clipped_by_source/plain"] == 0.0
    cfg.algo.prefix_clip_c = None  # the unbounded weight it replaces: -A * exp(20)
    means = run_update(model, batch, cfg, old=old)[0].means()
    assert means["pg_loss/max"] > 1e8 and "clip_dual" not in means


def test_the_default_config_bounds_prefix_tokens_and_rejects_a_bad_constant():
    assert compose_config([]).cfg.algo.prefix_clip_c == 3.0
    assert compose_config(["algo.prefix_clip_c=null"]).cfg.algo.prefix_clip_c is None
    for key in ("algo.prefix_clip_c", "algo.clip_c"):
        with pytest.raises(ConfigError, match=f"'{key}': 1.0 must be > 1"):
            compose_config([f"{key}=1.0"])
