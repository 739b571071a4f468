"""The objective: every per-token term (policy, KL, entropy) aggregated by the one ``algo.aggregation``, hand-computed; the
KL leaves seed-prefix tokens out and still counts them where the policy term does; the policy loss gets what it reads."""

import math

import pytest
import torch

from tsctl.algo.aggregations import loss_norms
from tsctl.algo.objective import Objective, Tokens
from tsctl.config.schema import AlgoConfig

E = math.e


def tokens(entropy=None, ref=None):
    """Row 0 has one loss token, row 1 three (its first a seed-prefix token); advantages 0, so the policy term is 0.

    d = ref - log pi: row 0 (1), row 1 (1 on the prefix token, then 0, 0); k3 = e^d - d - 1: e - 2 where d = 1, else 0.
    """
    logprobs = torch.tensor([[-1.0, 0.0, 0.0], [-2.0, -1.5, -0.5]], requires_grad=True)
    d = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]], dtype=torch.bool)
    prefix = torch.tensor([[0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    return Tokens(logprobs, logprobs.detach(), torch.zeros(2), mask, prefix, entropy, logprobs.detach() + d if ref else None)


def objective(aggregation: str, **algo) -> Objective:
    return Objective(AlgoConfig(aggregation=aggregation, **algo), seeded=True)


def test_grpo_takes_each_sequence_mean_of_the_kl_as_of_the_policy_term():
    # Row 0: its one token's k3 = e - 2; row 1: the prefix token is out of the KL but counts in the row's 3 tokens: 0 / 3.
    # Sequence-mean: ((e - 2) / 1 + 0 / 3) / 2. (The token-mean over the mini-batch's 4 tokens, (e - 2) / 4, is dapo's.)
    t = tokens(ref=True)
    loss = objective("grpo", kl_coef=0.5).loss(t, loss_norms(t.mask))
    assert loss.value.item() == pytest.approx(0.5 * (E - 2) / 2, rel=1e-6)
    loss.value.backward()
    # d k3 / d log pi = -(e^d - 1): row 0 weighs 1 / (1 token x 2 rows); the prefix token and the masked ones get nothing
    torch.testing.assert_close(t.logprobs.grad, torch.tensor([[-0.5 * (E - 1) / 2, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert loss.kl[1].tolist() == [[True, False, False], [False, True, True]]


def test_dapo_takes_the_token_mean_of_the_kl_over_every_loss_token():
    t = tokens(ref=True)
    loss = objective("dapo", kl_coef=0.5).loss(t, loss_norms(t.mask))
    assert loss.value.item() == pytest.approx(0.5 * (E - 2) / 4, rel=1e-6)


def test_the_entropy_bonus_is_aggregated_as_the_policy_term():
    entropy = torch.tensor([[2.0, 9.0, 9.0], [0.5, 0.5, 0.5]], requires_grad=True)
    t = tokens(entropy=entropy)
    grpo = objective("grpo", entropy_coef=0.1).loss(t, loss_norms(t.mask))
    assert grpo.value.item() == pytest.approx(-0.1 * (2.0 / 1 + 1.5 / 3) / 2, rel=1e-6)  # not -0.1 * 3.5 / 4
    grpo.value.backward()
    torch.testing.assert_close(entropy.grad, torch.tensor([[-0.1 / 2, 0.0, 0.0], [-0.1 / 6, -0.1 / 6, -0.1 / 6]]))
    dapo = objective("dapo", entropy_coef=0.1).loss(tokens(entropy=entropy.detach()), loss_norms(t.mask))
    assert dapo.value.item() == pytest.approx(-0.1 * 3.5 / 4, rel=1e-6)


def test_the_terms_add_up_under_one_aggregation():
    entropy = torch.tensor([[2.0, 9.0, 9.0], [0.5, 0.5, 0.5]])
    t = tokens(entropy=entropy, ref=True)
    loss = objective("grpo", kl_coef=0.5, entropy_coef=0.1).loss(t, loss_norms(t.mask))
    assert loss.value.item() == pytest.approx(0.5 * (E - 2) / 2 - 0.1 * 1.25, rel=1e-6)


def test_the_policy_loss_gets_the_keys_it_reads_and_the_prefix_dual_clip_only_when_it_declares_it():
    vanilla = objective("dapo", clip_high=0.3, clip_c=4.0)
    assert vanilla.arguments == {"clip_low": 0.2, "clip_high": 0.3, "clip_c": 4.0} and vanilla.prefix_clip_c == 3.0 and vanilla.dual_clip
    assert Objective(AlgoConfig(), seeded=False).prefix_clip_c is None  # no seeds, no prefix bound
    assert objective("dapo", policy_loss="cispo").prefix_clip_c is None


def test_a_missing_input_of_a_term_is_named():
    t = tokens()
    with pytest.raises(ValueError, match="needs entropy, ref"):
        objective("dapo", kl_coef=0.1, entropy_coef=0.1).loss(t, loss_norms(t.mask))
