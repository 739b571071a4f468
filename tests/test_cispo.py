"""CISPO (``algo.policy_loss=cispo``, one module with its own setting ``algo.cispo.eps_high``): hand-computed losses,
gradients and metrics, verl's formula, the setting given to the loss and refused where it cannot take effect, a micro train."""

import json
import math

import pytest
import torch

from loss_terms import policy_term
from tsctl.algo.aggregations import loss_norms
from tsctl.algo.cispo import CispoSettings
from tsctl.algo.losses import POLICY_LOSSES
from tsctl.algo.objective import Objective, Tokens
from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config

CAP = CispoSettings(eps_high=0.28)


def hand_batch():
    """2x3, pi_old log-probs -1 (row 0) and -2 (row 1); ratios row 0 (1, 2, 0.5) with A = +1, row 1 (1.5, 0.8, 1) with
    A = -2, row 1's last token out of the mask."""
    old = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    ratios = torch.tensor([[1.0, 2.0, 0.5], [1.5, 0.8, 1.0]])
    logprobs = (old + ratios.log()).detach().requires_grad_()
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    return logprobs, old, torch.tensor([1.0, -2.0]), mask


# Weights w = min(r, 1.28): row 0 (1, 1.28, 0.5), row 1 (1.28, 0.8, 1). Per-token loss -w A log pi:
ROW0 = [1.0, 1.28 * (1 - math.log(2)), 0.5 * (1 + math.log(2))]
ROW1 = [2 * 1.28 * (-2 + math.log(1.5)), 2 * 0.8 * (-2 + math.log(0.8)), 2 * 1.0 * -2.0]


def test_hand_computed_per_token_loss_metrics_and_aggregations():
    logprobs, old, adv, mask = hand_batch()
    per_token, m = POLICY_LOSSES.get("cispo")(logprobs, old, adv, mask, prefix=~mask & mask, settings=CAP)
    torch.testing.assert_close(per_token.detach(), torch.tensor([ROW0, ROW1]))
    assert m["clip_high"].tolist() == [[0, 1, 0], [1, 0, 0]] and torch.equal(m["clipped"], m["clip_high"])
    assert m["clip_low"].sum() == 0 and m["clip_dual"].sum() == 0
    torch.testing.assert_close(m["ratio"], torch.tensor([[1.0, 2.0, 0.5], [1.5, 0.8, 1.0]]))
    token_norm, seq_norm = loss_norms(mask)
    dapo, _ = policy_term("dapo", logprobs, old, adv, mask, policy_loss="cispo", settings=CAP, token_norm=token_norm, seq_norm=seq_norm)
    assert dapo.item() == pytest.approx((sum(ROW0) + ROW1[0] + ROW1[1]) / 5, abs=1e-6)
    grpo, _ = policy_term("grpo", logprobs, old, adv, mask, policy_loss="cispo", settings=CAP, token_norm=token_norm, seq_norm=seq_norm)
    assert grpo.item() == pytest.approx((sum(ROW0) / 3 + (ROW1[0] + ROW1[1]) / 2) / 2, abs=1e-6)


def test_a_truncated_token_keeps_its_gradient_where_ppo_clip_drops_it():
    # d loss / d log pi = -w A / 5 on every loss token: the weight is a constant (stop-gradient), never a zero.
    logprobs, old, adv, mask = hand_batch()
    token_norm, seq_norm = loss_norms(mask)
    loss, _ = policy_term("dapo", logprobs, old, adv, mask, policy_loss="cispo", settings=CAP, token_norm=token_norm, seq_norm=seq_norm)
    loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, -1.28, -0.5], [2.56, 1.6, 0.0]]) / 5)
    ppo = logprobs.detach().clone().requires_grad_()
    loss, _ = policy_term("dapo", ppo, old, adv, mask, clip_low=0.2, clip_high=0.28, token_norm=token_norm, seq_norm=seq_norm)
    loss.backward()
    assert ppo.grad[0, 1] == 0 and logprobs.grad[0, 1] != 0  # r = 2 > 1.28 with A > 0: vanilla's clip holds it


def verl_cispo_token_mean(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high):
    """verl's compute_policy_loss_cispo (token-mean), from its published formula: -sg(clip(r, 1 - low, 1 + high)) A log pi."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0))
    clipped_ratio = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high).detach()
    pg_losses = -clipped_ratio * advantages.unsqueeze(-1) * log_prob
    m = response_mask.float()
    return (pg_losses * m).sum() / m.sum()


@pytest.mark.parametrize("eps_high", [0.28, 4.0])
def test_cispo_matches_verl_without_a_lower_bound(eps_high):
    torch.manual_seed(0)
    old = -torch.rand(5, 7) * 3
    logprobs = (old + torch.randn(5, 7) * 0.8).requires_grad_()
    adv, mask = torch.randn(5), torch.arange(7) < torch.tensor([7, 1, 4, 6, 2]).unsqueeze(-1)
    token_norm, seq_norm = loss_norms(mask)
    ours, _ = policy_term("dapo", logprobs, old, adv, mask, policy_loss="cispo", settings=CispoSettings(eps_high), token_norm=token_norm, seq_norm=seq_norm)
    theirs_logprobs = logprobs.detach().clone().requires_grad_()
    theirs = verl_cispo_token_mean(old, theirs_logprobs, adv, mask, 1.0, eps_high)  # the paper: no lower bound
    torch.testing.assert_close(ours, theirs)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(logprobs.grad, theirs_logprobs.grad)


def test_the_objective_gives_cispo_its_own_setting():
    cfg = compose_config(["algo.policy_loss=cispo", "algo.cispo.eps_high=1.0"], idle=True).cfg
    objective = Objective(cfg.algo, seeded=False)
    assert objective.arguments == {"settings": CispoSettings(eps_high=1.0)} and not objective.prefix_clip and not objective.dual_clip
    logprobs, old, adv, mask = hand_batch()
    loss = objective.loss(Tokens(logprobs, old, adv, mask, torch.zeros_like(mask)), loss_norms(mask))
    # cap 2: every weight is the ratio itself (row 0's r = 2 is at the cap)
    w = torch.tensor([[1.0, 2.0, 0.5], [1.5, 0.8, 1.0]])
    want = (-w * adv.unsqueeze(-1) * logprobs.detach())[mask].sum() / 5
    assert loss.value.item() == pytest.approx(want.item(), abs=1e-6) and loss.tokens["clipped"].sum() == 0


@pytest.mark.parametrize("overrides, key, words", [
    (["algo.cispo.eps_high=1.0"], "algo.cispo.eps_high", "it is read only with algo.policy_loss=cispo"),
    (["algo.policy_loss=cispo", "algo.clip_high=0.3"], "algo.clip_high", "it is read only with algo.policy_loss=vanilla|"),
    (["algo.policy_loss=cispo", "ratio=25", "algo.prefix_clip_c=5"], "algo.prefix_clip_c", "it is read only with algo.policy_loss=vanilla|"),
    (["algo.policy_loss=cispo", "algo.cispo.eps_high=0"], "algo.cispo.eps_high", "0.0 must be > 0"),
    (["algo.policy_loss=cispo", "algo.cispo.clip=2"], "algo.cispo.clip", "unknown key"),
])
def test_its_setting_is_refused_where_it_cannot_take_effect_and_others_with_it(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, idle=True)
    assert err.value.key == key and words in str(err.value)


@pytest.mark.slow
def test_a_micro_train_with_cispo(micro, tmp_path):
    from tsctl.stages.train import train

    train(compose_config([*micro, "name=cispo", "ratio=25", "algo.policy_loss=cispo", "algo.cispo.eps_high=2.0", "trainer.eval_every=0"], idle=True))
    run = tmp_path / "runs" / "default" / "cispo"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and all(math.isfinite(r["pg_loss"]) and "clip_dual" not in r for r in records)
    assert "eps_high: 2.0" in (run / "config.yaml").read_text()
