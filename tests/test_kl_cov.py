"""KL-Cov (``algo.policy_loss=kl_cov``, Cui et al., arXiv 2505.22617): the top-k covariance tokens take
``kl_coef |log pi_theta - log pi_old|`` on top of PPO's clipped loss, hand-computed values and gradients, seed-prefix
tokens never penalised, the settings refused out of range or idle, and a micro train whose metrics.jsonl logs
``penalised`` by source."""

import math

import pytest
import torch

from selection_cases import assert_refused, hand_term, micro_train
from tsctl.algo.kl_cov import KlCovSettings

LOG_RATIO = torch.tensor([[0.1, 0.0, 0.0], [0.0, 0.0, -0.1]])
"""log r_t = log pi_theta - log pi_old of the hand batch."""


def run(settings, prefix=None):
    """:func:`selection_cases.hand_batch` (row 0 A = +1 with log pi (-1, -2, -3), row 1 A = -1 with log pi (-1, -2, -6)),
    log pi_old = log pi - ``LOG_RATIO``."""
    return hand_term("kl_cov", old_shift=-LOG_RATIO, prefix=prefix, settings=settings)


# Cov(y_i) = (log pi(y_i) - mean log pi) * (A(y_i) - mean A) over the 6 tokens (means -2.5 and 0):
# row 0 (1.5, 0.5, -0.5), row 1 (-1.5, -0.5, 3.5). Rank: (1, 2) 3.5, (0, 0) 1.5, (0, 1) 0.5, ...
E_UP, E_DOWN = math.exp(0.1), math.exp(-0.1)


def test_the_top_k_covariance_tokens_take_the_penalty_by_hand():
    # k_ratio 0.34: floor(0.34 x 6) = 2 tokens, (1, 2) and (0, 0). r = e^0.1 (A = +1, under 1.28) and e^-0.1 (A = -1,
    # above 0.8): no clip. l_t = -A r_t + [t in I_KL] 1 x |log r_t|:
    # (0, 0): -e^0.1 + 0.1; (0, 1), (0, 2): -1; (1, 0), (1, 1): +1; (1, 2): e^-0.1 + 0.1.
    loss, m, grad = run(KlCovSettings(k_ratio=0.34, kl_coef=1.0))
    assert m["penalised"].tolist() == [[1, 0, 0], [0, 0, 1]]
    want = torch.tensor([[-E_UP + 0.1, -1, -1], [1, 1, E_DOWN + 0.1]])
    torch.testing.assert_close(m["pg_loss"], want)
    assert loss.item() == pytest.approx(want.sum().item() / 6)
    # d l_t / d log pi = -A r_t + kl_coef sign(log r_t): (0, 0) -e^0.1 + 1, (1, 2) e^-0.1 - 1; over 6 tokens.
    torch.testing.assert_close(grad, torch.tensor([[1 - E_UP, -1, -1], [1, 1, E_DOWN - 1]]) / 6)


def test_the_coefficient_scales_the_penalty_and_one_token_is_the_least():
    # k_ratio 0.002 x 6 rounds to 0: one token, the top one (1, 2); kl_coef 3: l = e^-0.1 + 3 x 0.1.
    _, m, grad = run(KlCovSettings(k_ratio=0.002, kl_coef=3.0))
    assert m["penalised"].tolist() == [[0, 0, 0], [0, 0, 1]]
    assert m["pg_loss"][1, 2].item() == pytest.approx(E_DOWN + 0.3) and m["pg_loss"][0, 0].item() == pytest.approx(-E_UP)
    assert grad[1, 2].item() == pytest.approx((E_DOWN - 3) / 6)


def test_seed_prefix_tokens_are_never_penalised():
    # (1, 2) a prefix token: the covariance over the other 5 (means -1.8 and 0.2) is row 0 (0.64, -0.16, -0.96),
    # row 1 (-0.96, 0.24): the top one is (0, 0), though (1, 2) would top the ranking with it in.
    prefix = torch.tensor([[0, 0, 0], [0, 0, 1]], dtype=torch.bool)
    _, m, grad = run(KlCovSettings(k_ratio=0.2), prefix=prefix)
    assert m["penalised"].tolist() == [[1, 0, 0], [0, 0, 0]]
    assert grad[1, 2].item() == pytest.approx(E_DOWN / 6)  # -A r_t alone


@pytest.mark.parametrize("overrides, key, words", [
    (["algo.kl_cov.k_ratio=0.01"], "algo.kl_cov.k_ratio", "it is read only with algo.policy_loss=kl_cov"),
    (["algo.policy_loss=kl_cov", "algo.kl_cov.k_ratio=0"], "algo.kl_cov.k_ratio", "0.0 must be > 0"),
    (["algo.policy_loss=kl_cov", "algo.kl_cov.k_ratio=2"], "algo.kl_cov.k_ratio", "allowed: 0.0 <= algo.kl_cov.k_ratio <= 1.0"),
    (["algo.policy_loss=kl_cov", "algo.kl_cov.kl_coef=0"], "algo.kl_cov.kl_coef", "0.0 must be > 0"),
    (["algo.policy_loss=clip_cov", "algo.kl_cov.kl_coef=2"], "algo.kl_cov.kl_coef", "it is read only with algo.policy_loss=kl_cov"),
])
def test_its_settings_are_refused_out_of_range_or_idle(overrides, key, words):
    assert_refused(overrides, key, words)


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0, 25])
def test_a_micro_train_logs_the_penalised_share_by_source(micro, tmp_path, ratio):
    records, config = micro_train(micro, tmp_path, f"kl_cov_{ratio}", ratio, "algo.policy_loss=kl_cov", "algo.kl_cov.k_ratio=0.1")
    # floor(0.1 x N) (at least 1) of each micro-batch's N suffix and plain tokens: about a tenth of them, never none.
    assert all(0 < r["penalised"] <= 0.2 and 0 <= r["penalised_by_source/plain"] <= 1 for r in records)
    if ratio:
        assert all(r["penalised_by_source/prefix"] == 0 and 0 <= r["penalised_by_source/suffix"] <= 1 for r in records)
    else:
        assert all(r["penalised_by_source/plain"] == r["penalised"] for r in records)
        assert not any(key.startswith(("penalised_by_source/prefix", "penalised_by_source/suffix")) for r in records for key in r)
    assert "k_ratio: 0.1" in config
