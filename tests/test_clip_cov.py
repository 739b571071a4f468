"""Clip-Cov (``algo.policy_loss=clip_cov``, Cui et al., arXiv 2505.22617): hand-computed covariances, the tokens whose
gradient is dropped (the window, PPO's clipped tokens left out, seed-prefix tokens never drawn), the draw reproducible
from the update's stream, the settings refused out of range or idle, and a micro train whose metrics.jsonl logs
``masked`` by source."""

import pytest
import torch

from selection_cases import assert_refused, hand_batch, hand_term, micro_train
from tsctl.algo.aggregations import loss_norms
from tsctl.algo.clip_cov import ClipCovSettings
from tsctl.algo.objective import Objective, Tokens
from tsctl.algo.token_selection import centred_covariance
from tsctl.runconfig import compose_config

# Cov(y_i) = (log pi(y_i) - mean log pi) * (A(y_i) - mean A), the means over the 6 loss tokens:
# mean log pi = (-1 - 2 - 3 - 1 - 2 - 6) / 6 = -2.5, mean A = 0, so
# row 0: (1.5, 0.5, -0.5) x (+1) = (1.5, 0.5, -0.5); row 1: (1.5, 0.5, -3.5) x (-1) = (-1.5, -0.5, 3.5).
COV = [[1.5, 0.5, -0.5], [-1.5, -0.5, 3.5]]


def run(settings, *, prefix=None, old_shift=None, seed=0):
    return hand_term("clip_cov", old_shift=old_shift, prefix=prefix, settings=settings, generator=torch.Generator().manual_seed(seed))


def test_the_centred_covariance_by_hand():
    logprobs, _, adv, mask = hand_batch()
    torch.testing.assert_close(centred_covariance(logprobs, adv, mask), torch.tensor(COV))


def test_the_tokens_in_the_window_lose_their_gradient_and_keep_their_value():
    # Window [1, 5]: (0, 0) at 1.5 and (1, 2) at 3.5. clip_ratio 0.5: max(floor(0.5 x 6), 1) = 3 >= 2 in the window: both.
    loss, m, grad = run(ClipCovSettings(clip_ratio=0.5, cov_lb=1.0, cov_ub=5.0))
    assert m["masked"].tolist() == [[1, 0, 0], [0, 0, 1]]
    # Every ratio is 1 (no clip): l_t = -A r_t, so row 0 is -1 and row 1 +1 per token, dropped tokens included (detached).
    assert loss.item() == pytest.approx((-3 + 3) / 6)
    # d l_t / d log pi = -A r_t = -A; over the 6 tokens of the token-mean; 0 on the two dropped tokens.
    torch.testing.assert_close(grad, torch.tensor([[0.0, -1, -1], [1, 1, 0]]) / 6)
    torch.testing.assert_close(m["pg_loss"], torch.tensor([[-1.0, -1, -1], [1, 1, 1]]))


def test_the_window_is_closed_and_a_token_outside_keeps_its_gradient():
    # [0.5, 1.5] holds (0, 0) at 1.5 and (0, 1) at 0.5; 3.5 is above it.
    _, m, grad = run(ClipCovSettings(clip_ratio=0.5, cov_lb=0.5, cov_ub=1.5))
    assert m["masked"].tolist() == [[1, 1, 0], [0, 0, 0]] and grad[1, 2] == pytest.approx(1 / 6)


def test_a_token_ppo_already_clips_is_not_drawn():
    # log pi_old of (1, 2) one above log pi: r = e^-1 ~ 0.37 < 1 - 0.2 with A = -1, the lower clip holds it (gradient 0):
    # it leaves the window, which keeps (0, 0) alone.
    shift = torch.tensor([[0.0, 0, 0], [0, 0, 1]])
    _, m, grad = run(ClipCovSettings(clip_ratio=0.5), old_shift=shift)
    assert m["clip_low"][1, 2] == 1 and m["masked"].tolist() == [[1, 0, 0], [0, 0, 0]]
    assert grad[1, 2] == 0 and grad[0, 0] == 0 and grad[0, 1] == pytest.approx(-1 / 6)


def test_seed_prefix_tokens_leave_the_means_and_are_never_drawn():
    # (1, 2) a prefix token: the means over the other 5: log pi -9/5 = -1.8, A 1/5 = 0.2, so
    # Cov = row 0 (0.8 x 0.8, -0.2 x 0.8, -1.2 x 0.8) = (0.64, -0.16, -0.96), row 1 (0.8 x -1.2, -0.2 x -1.2) = (-0.96, 0.24).
    prefix = torch.tensor([[0, 0, 0], [0, 0, 1]], dtype=torch.bool)
    logprobs, _, adv, mask = hand_batch()
    cov = centred_covariance(logprobs, adv, mask & ~prefix)
    torch.testing.assert_close(cov, torch.tensor([[0.64, -0.16, -0.96], [-0.96, 0.24, 0.0]]))
    # Window [0.5, 5]: (0, 0) only; the prefix token (3.5 with it in the means) stays out, and keeps its gradient.
    _, m, grad = run(ClipCovSettings(clip_ratio=0.5, cov_lb=0.5), prefix=prefix)
    assert m["masked"].tolist() == [[1, 0, 0], [0, 0, 0]] and grad[1, 2] == pytest.approx(1 / 6)


def test_the_draw_is_uniform_in_the_window_and_the_same_for_the_same_stream():
    # clip_ratio 0.2: max(floor(1.2), 1) = 1 of the 2 window tokens, drawn from the generator.
    settings = ClipCovSettings(clip_ratio=0.2)
    picks = {tuple(map(tuple, run(settings, seed=s)[1]["masked"].nonzero().tolist())) for s in range(20)}
    assert picks == {((0, 0),), ((1, 2),)}
    assert all(torch.equal(run(settings, seed=s)[1]["masked"], run(settings, seed=s)[1]["masked"]) for s in range(5))


def test_at_least_one_token_is_drawn_when_the_share_rounds_to_none():
    # The paper's default 2e-4 x 6 tokens rounds to 0; as verl, one token is drawn.
    _, m, _ = run(ClipCovSettings())
    assert m["masked"].sum() == 1


def test_the_objective_gives_it_the_stream_and_refuses_tokens_without_one():
    cfg = compose_config(["algo.policy_loss=clip_cov", "algo.clip_cov.clip_ratio=0.5"], idle=True).cfg
    objective = Objective(cfg.algo, seeded=False)
    assert objective.draws and not objective.entropy and objective.arguments["settings"] == ClipCovSettings(clip_ratio=0.5)
    logprobs, old, adv, mask = hand_batch()
    t = Tokens(logprobs, old, adv, mask, torch.zeros_like(mask), generator=torch.Generator().manual_seed(0))
    loss = objective.loss(t, loss_norms(mask))
    assert loss.tokens["masked"].tolist() == [[1, 0, 0], [0, 0, 1]]
    with pytest.raises(ValueError, match="needs generator"):
        objective.loss(Tokens(logprobs, old, adv, mask, torch.zeros_like(mask)), loss_norms(mask))


@pytest.mark.parametrize("overrides, key, words", [
    (["algo.clip_cov.clip_ratio=0.001"], "algo.clip_cov.clip_ratio", "it is read only with algo.policy_loss=clip_cov"),
    (["algo.policy_loss=clip_cov", "algo.clip_cov.clip_ratio=0"], "algo.clip_cov.clip_ratio", "0.0 must be > 0"),
    (["algo.policy_loss=clip_cov", "algo.clip_cov.clip_ratio=1.5"], "algo.clip_cov.clip_ratio", "allowed: 0.0 <= algo.clip_cov.clip_ratio <= 1.0"),
    (["algo.policy_loss=clip_cov", "algo.clip_cov.cov_lb=0"], "algo.clip_cov.cov_lb", "0.0 must be > 0"),
    (["algo.policy_loss=clip_cov", "algo.clip_cov.cov_ub=1"], "algo.clip_cov.cov_ub", "must be > algo.clip_cov.cov_lb=1.0"),
    (["algo.policy_loss=kl_cov", "algo.clip_cov.cov_ub=9"], "algo.clip_cov.cov_ub", "it is read only with algo.policy_loss=clip_cov"),
])
def test_its_settings_are_refused_out_of_range_or_idle(overrides, key, words):
    assert_refused(overrides, key, words)


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0, 25])
def test_a_micro_train_logs_the_masked_share_by_source(micro, tmp_path, ratio):
    # A window wide enough to hold every token of positive covariance, and a share that drops them all.
    records, config = micro_train(micro, tmp_path, f"clip_cov_{ratio}", ratio, "algo.policy_loss=clip_cov", "algo.clip_cov.clip_ratio=1",
                                  "algo.clip_cov.cov_lb=1e-9", "algo.clip_cov.cov_ub=1e9")
    assert all(0 <= r["masked"] <= 1 and 0 <= r["masked_by_source/plain"] <= 1 for r in records)
    if ratio:
        assert all(r["masked_by_source/prefix"] == 0 and 0 <= r["masked_by_source/suffix"] <= 1 for r in records)
    else:
        assert not any(key.startswith(("masked_by_source/prefix", "masked_by_source/suffix")) for r in records for key in r)
    assert any(r["masked"] > 0 for r in records)
    assert "clip_ratio: 1.0" in config
