"""Policy losses, their metrics, the aggregations and their normalisers."""

import functools

import pytest
import torch

from loss_terms import policy_term
from tsctl.algo.aggregations import AGGREGATIONS, loss_norms
from tsctl.algo.losses import POLICY_LOSSES, ppo_clip, token_log_ratio
from tsctl.algo.divergences import kl_penalty_k3

CLIPS = dict(clip_low=0.2, clip_high=0.28)


def hand_batch():
    """Two sequences with chosen ratios; row 0 ends in a padding token (ratio 10, outside the mask).

    row 0, A = +1: r = 1.0, 1.5 (upper clip), 0.5 (no clip: min picks r * A), pad
    row 1, A = -2: r = 0.5 (lower clip), 1.5 (no clip: max picks -A r), 4.0 (dual clip at c = 3), 1.0
    """
    ratios = torch.tensor([[1.0, 1.5, 0.5, 10.0], [0.5, 1.5, 4.0, 1.0]])
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-0.7, -1.2, -2.5, -0.1]])
    logprobs = (old + ratios.log()).requires_grad_()
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    return logprobs, old, adv, mask


# Per-token losses written out by hand:
#   row 0: -1.0, -min(1.5, 1.28) = -1.28, -min(0.5, 0.8) = -0.5
#   row 1: max(1.0, 1.6) = 1.6, max(3.0, 2.56) = 3.0, min(max(8.0, 2.56), 6.0) = 6.0, 2.0
ROW0 = -1.0 - 1.28 - 0.5
ROW1_DUAL = 1.6 + 3.0 + 6.0 + 2.0
ROW1_NO_DUAL = 1.6 + 3.0 + 8.0 + 2.0


def run(name, logprobs, old, adv, mask, clip_c, norms_mask=None):
    token_norm, seq_norm = loss_norms(mask if norms_mask is None else norms_mask)
    return policy_term(name, logprobs, old, adv, mask, **CLIPS, clip_c=clip_c, token_norm=token_norm, seq_norm=seq_norm)


def test_dapo_hand_values_with_and_without_dual_clip():
    logprobs, old, adv, mask = hand_batch()
    loss, _ = run("dapo", logprobs, old, adv, mask, clip_c=3.0)
    assert loss.item() == pytest.approx((ROW0 + ROW1_DUAL) / 7, abs=1e-6)
    loss, _ = run("dapo", logprobs, old, adv, mask, clip_c=None)
    assert loss.item() == pytest.approx((ROW0 + ROW1_NO_DUAL) / 7, abs=1e-6)


def test_grpo_hand_values():
    logprobs, old, adv, mask = hand_batch()
    loss, _ = run("grpo", logprobs, old, adv, mask, clip_c=3.0)
    assert loss.item() == pytest.approx((ROW0 / 3 + ROW1_DUAL / 4) / 2, abs=1e-6)


def test_dapo_hand_gradient():
    # d loss / d logprob_t = -A r_t / 7 where the unclipped term is selected, 0 where a clip is active
    logprobs, old, adv, mask = hand_batch()
    loss, _ = run("dapo", logprobs, old, adv, mask, clip_c=3.0)
    loss.backward()
    expected = torch.tensor([[-1.0, 0.0, -0.5, 0.0], [0.0, 3.0, 0.0, 2.0]]) / 7
    torch.testing.assert_close(logprobs.grad, expected)


def test_hand_metrics():
    logprobs, old, adv, mask = hand_batch()
    _, m = run("dapo", logprobs, old, adv, mask, clip_c=3.0)
    assert all(v.shape == (2, 4) and not v.requires_grad for v in m.values())
    f = mask.float()
    assert torch.equal(m["clip_high"] * f, torch.tensor([[0.0, 1, 0, 0], [0, 0, 0, 0]]))
    assert torch.equal(m["clip_low"] * f, torch.tensor([[0.0, 0, 0, 0], [1, 0, 0, 0]]))
    assert torch.equal(m["clip_dual"] * f, torch.tensor([[0.0, 0, 0, 0], [0, 0, 1, 0]]))
    assert torch.equal(m["clipped"] * f, torch.tensor([[0.0, 1, 0, 0], [1, 0, 1, 0]]))
    torch.testing.assert_close(m["ratio"][0, :3], torch.tensor([1.0, 1.5, 0.5]))
    r = torch.tensor([1.0, 1.5, 0.5])
    torch.testing.assert_close(m["kl_k3"][0, :3], r - 1 - r.log())
    torch.testing.assert_close(m["pg_loss"][0, :3], torch.tensor([-1.0, -1.28, -0.5]))
    _, m = run("dapo", logprobs, old, adv, mask, clip_c=None)
    assert m["clip_dual"].sum() == 0


def verl_vanilla_token_mean(old_log_prob, log_prob, advantages, response_mask, low, high, c):
    """verl's compute_policy_loss_vanilla (token-mean), re-derived from its published formula."""
    neg_kl = torch.clamp(log_prob - old_log_prob, -20.0, 20.0)
    ratio = torch.exp(neg_kl)
    adv = advantages.unsqueeze(-1)
    pg_losses1 = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, 1 - low, 1 + high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    m = response_mask.float()
    pg_clipfrac = (torch.gt(pg_losses2, pg_losses1).float() * m).sum() / m.sum()
    pg_losses3 = -adv * c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_clipfrac_lower = ((torch.gt(clip_pg_losses1, pg_losses3) * (adv < 0)).float() * m).sum() / m.sum()
    pg_losses = torch.where(adv < 0, clip_pg_losses2, clip_pg_losses1)
    return (pg_losses * m).sum() / m.sum(), pg_clipfrac, pg_clipfrac_lower


@pytest.mark.parametrize("clip_c", [3.0, 1.5, None])
def test_dapo_matches_verl_vanilla(clip_c):
    torch.manual_seed(0)
    b, t = 6, 9
    old = -torch.rand(b, t) * 3
    logprobs = (old + torch.randn(b, t) * 0.6).requires_grad_()
    adv = torch.randn(b)
    adv[0] = 0.0
    mask = torch.arange(t) < torch.tensor([9, 1, 5, 7, 3, 8]).unsqueeze(-1)
    loss, m = run("dapo", logprobs, old, adv, mask, clip_c=clip_c)
    ref_logprobs = logprobs.detach().clone().requires_grad_()
    ref, clipfrac, clipfrac_lower = verl_vanilla_token_mean(
        old, ref_logprobs, adv, mask, 0.2, 0.28, 1e30 if clip_c is None else clip_c
    )
    torch.testing.assert_close(loss, ref)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(logprobs.grad, ref_logprobs.grad)
    f = mask.float()
    torch.testing.assert_close(((m["clip_low"] + m["clip_high"]) * f).sum() / f.sum(), clipfrac)
    torch.testing.assert_close((m["clip_dual"] * f).sum() / f.sum(), clipfrac_lower)
    assert m["clip_high"].sum() > 0 and m["clip_low"].sum() > 0


class TinyPolicy(torch.nn.Module):
    """Per-token log-probs from a linear score: logprob = -softplus(x @ w)."""

    def __init__(self, dim):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(dim) * 0.5)

    def forward(self, x):
        return -torch.nn.functional.softplus(x @ self.w)


@pytest.mark.parametrize("name", ["dapo", "grpo"])
@pytest.mark.parametrize("split", [[1, 1, 1, 1, 1, 1], [2, 3, 1], [4, 2], [3, 3]])
def test_micro_batch_split_equals_unsplit(name, split):
    torch.manual_seed(3)
    b, t, d = 6, 11, 5
    x = torch.randn(b, t, d)
    policy = TinyPolicy(d)
    with torch.no_grad():
        old = policy(x) + torch.randn(b, t) * 0.4
    adv = torch.randn(b)
    lengths = torch.tensor([11, 2, 0, 7, 4, 9])  # ragged, one row without loss tokens
    mask = torch.arange(t) < lengths.unsqueeze(-1)
    token_norm, seq_norm = loss_norms(mask)
    kw = dict(**CLIPS, clip_c=3.0, token_norm=token_norm, seq_norm=seq_norm)
    fn = functools.partial(policy_term, name)

    full, _ = fn(policy(x), old, adv, mask, **kw)
    full.backward()
    full_grad = policy.w.grad.clone()
    policy.w.grad = None

    total = torch.zeros(())
    start = 0
    for size in split:
        sl = slice(start, start + size)
        micro, _ = fn(policy(x[sl]), old[sl], adv[sl], mask[sl], **kw)
        micro.backward()
        total = total + micro.detach()
        start += size

    torch.testing.assert_close(total, full.detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(policy.w.grad, full_grad, atol=1e-6, rtol=0)


def test_loss_norms_and_empty_batch():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    token_norm, seq_norm = loss_norms(mask)
    assert token_norm.item() == 3 and seq_norm.item() == 2
    empty = torch.zeros(2, 3, dtype=torch.bool)
    logprobs = torch.zeros(2, 3, requires_grad=True)
    for name in ("dapo", "grpo"):
        loss, _ = run(name, logprobs, torch.zeros(2, 3), torch.ones(2), empty, clip_c=None)
        assert loss.item() == 0.0


def test_registry():
    assert {"dapo", "grpo"} <= set(AGGREGATIONS.names()) and {"vanilla", "gspo", "cispo"} <= set(POLICY_LOSSES.names())
    with pytest.raises(ValueError, match=r"unknown loss aggregation 'ppo'; valid: dapo, grpo"):
        AGGREGATIONS.get("ppo")
    with pytest.raises(ValueError, match="already registered"):
        AGGREGATIONS.register("dapo")(lambda *a, **k: None)


def test_dapo_and_grpo_share_the_clipped_objective_and_differ_in_aggregation():
    logprobs, old, adv, mask = hand_batch()
    per_token, _ = ppo_clip(token_log_ratio(logprobs, old), adv, **CLIPS, clip_c=3.0)
    torch.testing.assert_close(per_token[mask].sum(), torch.tensor(ROW0 + ROW1_DUAL))
    dapo, dapo_metrics = run("dapo", logprobs, old, adv, mask, clip_c=3.0)
    grpo, grpo_metrics = run("grpo", logprobs, old, adv, mask, clip_c=3.0)
    assert all(torch.equal(dapo_metrics[k], grpo_metrics[k]) for k in dapo_metrics)
    # Token-mean over 7 loss tokens against the mean of the two rows' token-means (3 and 4 tokens).
    assert dapo.item() == pytest.approx((ROW0 + ROW1_DUAL) / 7, abs=1e-6)
    assert grpo.item() == pytest.approx((ROW0 / 3 + ROW1_DUAL / 4) / 2, abs=1e-6)
    assert abs(dapo.item() - grpo.item()) > 0.1


def test_kl_penalty_k3():
    logprobs = torch.tensor([[-1.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.0, -1.5, -2.5]])
    d = ref - logprobs
    torch.testing.assert_close(kl_penalty_k3(logprobs, ref), d.exp() - d - 1)
    assert kl_penalty_k3(logprobs, ref)[0, 0].item() == 0.0
    assert (kl_penalty_k3(torch.randn(4, 5), torch.randn(4, 5)) >= 0).all()
    assert kl_penalty_k3(torch.tensor([[-30.0]]), torch.tensor([[0.0]])).item() == 10.0
