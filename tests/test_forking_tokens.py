"""Forking tokens (``algo.policy_loss=forking_tokens``, Wang et al., arXiv 2506.01939): the policy gradient only on the
top ``top_share`` of loss tokens by ``pi_theta``'s entropy, hand-computed; ``top_share=1`` is ``vanilla``; the objective
asks the forward for entropies for it and gives them detached, without an entropy term; the setting refused out of range
or idle; a micro train whose metrics.jsonl logs ``masked`` by source."""

import pytest
import torch

from selection_cases import assert_refused, hand_batch, hand_term, micro_train
from tsctl.algo.aggregations import loss_norms
from tsctl.algo.forking_tokens import ForkingTokensSettings, high_entropy
from tsctl.algo.objective import Objective, Tokens
from tsctl.config.schema import AlgoConfig

ENTROPY = torch.tensor([[0.9, 0.1, 0.5], [0.3, 0.7, 0.2]])
"""pi_theta's entropy at each token of :func:`selection_cases.hand_batch` (every ratio 1; row 0 A = +1, row 1 A = -1)."""


def run(top_share, entropy=ENTROPY, policy_loss="forking_tokens"):
    arguments = {"settings": ForkingTokensSettings(top_share), "entropy": entropy} if policy_loss == "forking_tokens" else {}
    return hand_term(policy_loss, **arguments)


def test_only_the_top_share_by_entropy_keeps_its_gradient():
    # J = 1/sum|o_i| sum 1[H_t >= tau] min(r A, clip(r) A). top_share 0.5: ceil(0.5 x 6) = 3 tokens, tau = the 3rd largest
    # entropy (0.9, 0.7, 0.5) = 0.5: kept (0, 0), (0, 2), (1, 1). r = 1: l_t = -A on kept tokens, 0 elsewhere.
    loss, m, grad = run(0.5)
    assert m["masked"].tolist() == [[0, 1, 0], [1, 0, 1]]
    torch.testing.assert_close(m["pg_loss"], torch.tensor([[-1.0, 0, -1], [0, 1, 0]]))
    assert loss.item() == pytest.approx((-1 - 1 + 1) / 6)  # the held-out tokens stay in the token-mean's 6
    torch.testing.assert_close(grad, torch.tensor([[-1.0, 0, -1], [0, 1, 0]]) / 6)


def test_the_paper_default_keeps_a_fifth_and_ties_at_the_threshold_are_kept():
    # top_share 0.2: ceil(1.2) = 2 tokens, tau = 0.7: (0, 0) and (1, 1).
    assert run(0.2)[1]["masked"].tolist() == [[0, 1, 1], [1, 0, 1]]
    # (0, 2) tied with (1, 1) at tau = 0.7: H >= tau keeps both (3 tokens for a count of 2).
    tied = torch.tensor([[0.9, 0.1, 0.7], [0.3, 0.7, 0.2]])
    assert high_entropy(tied, torch.ones(2, 3, dtype=torch.bool), 0.2).tolist() == [[True, False, True], [False, True, False]]


def test_the_ranking_is_over_the_loss_tokens_only():
    # Out of the mask, (0, 0) (entropy 0.9) neither counts nor is kept: ceil(0.2 x 5) = 1 token, the top of the rest (1, 1).
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    assert high_entropy(ENTROPY, mask, 0.2).tolist() == [[False, False, False], [False, True, False]]


def test_a_top_share_of_one_is_vanilla():
    loss, m, grad = run(1.0)
    vanilla_loss, vanilla_m, vanilla_grad = run(1.0, policy_loss="vanilla")
    assert m["masked"].sum() == 0 and loss.item() == vanilla_loss.item() and torch.equal(grad, vanilla_grad)


def test_the_objective_asks_for_entropies_and_passes_them_detached_without_an_entropy_term():
    objective = Objective(AlgoConfig(policy_loss="forking_tokens"), seeded=True)
    assert objective.entropy and objective.entropy_coef == 0 and not objective.draws
    logprobs, old, adv, mask = hand_batch()
    entropy = ENTROPY.clone().requires_grad_()
    # Row 1's first token a seed prefix: ranked with the others by its entropy (0.3, below tau = 0.5: held out).
    prefix = torch.tensor([[0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    loss = objective.loss(Tokens(logprobs, old, adv, mask, prefix, entropy), loss_norms(mask))
    loss.value.backward()
    # The policy term alone (as in the hand-computed case of top_share 0.2: -1 + 1 over 6), no -entropy_coef * H.
    assert loss.value.item() == pytest.approx(0.0) and loss.tokens["masked"].tolist() == [[0, 1, 1], [1, 0, 1]]
    assert entropy.grad is None and logprobs.grad[0, 0].item() == pytest.approx(-1 / 6)
    with pytest.raises(ValueError, match="needs entropy"):
        objective.loss(Tokens(logprobs, old, adv, mask, prefix), loss_norms(mask))


def test_a_kept_prefix_token_has_its_dual_clip():
    # Prefix token (1, 1), entropy 0.7 (kept at top_share 0.2), A = -1, r = e^2 ~ 7.4 > algo.prefix_clip_c = 3: its
    # loss is capped at -A x 3 = 3 and its gradient is 0.
    objective = Objective(AlgoConfig(policy_loss="forking_tokens"), seeded=True)
    logprobs, old, adv, mask = hand_batch()
    old = old - torch.tensor([[0.0, 0, 0], [0, 2, 0]])
    prefix = torch.tensor([[0, 0, 0], [0, 1, 0]], dtype=torch.bool)
    loss = objective.loss(Tokens(logprobs, old, adv, mask, prefix, ENTROPY), loss_norms(mask))
    loss.value.backward()
    assert loss.tokens["clip_dual"][1, 1] == 1 and loss.tokens["pg_loss"][1, 1].item() == pytest.approx(3.0)
    assert logprobs.grad[1, 1] == 0 and logprobs.grad[0, 0].item() == pytest.approx(-1 / 6)


@pytest.mark.parametrize("overrides, key, words", [
    (["algo.forking_tokens.top_share=0.5"], "algo.forking_tokens.top_share", "it is read only with algo.policy_loss=forking_tokens"),
    (["algo.policy_loss=forking_tokens", "algo.forking_tokens.top_share=0"], "algo.forking_tokens.top_share", "0.0 must be > 0"),
    (["algo.policy_loss=forking_tokens", "algo.forking_tokens.top_share=1.2"], "algo.forking_tokens.top_share",
     "allowed: 0.0 <= algo.forking_tokens.top_share <= 1.0"),
])
def test_its_setting_is_refused_out_of_range_or_idle(overrides, key, words):
    assert_refused(overrides, key, words)


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0, 25])
def test_a_micro_train_logs_the_masked_share_by_source(micro, tmp_path, ratio):
    records, config = micro_train(micro, tmp_path, f"forking_{ratio}", ratio, "algo.policy_loss=forking_tokens", "algo.forking_tokens.top_share=0.5")
    # Each micro-batch keeps ceil(0.5 N) of its N loss tokens (ties kept): at most half of them are masked, about half.
    assert all(0.3 < r["masked"] <= 0.5 for r in records)
    sources = ("plain", "prefix", "suffix") if ratio else ("plain",)
    assert all(0 <= r[f"masked_by_source/{s}"] <= 1 for r in records for s in sources)
    if not ratio:
        assert all(r["masked_by_source/plain"] == r["masked"] and "masked_by_source/prefix" not in r for r in records)
    assert "top_share: 0.5" in config
