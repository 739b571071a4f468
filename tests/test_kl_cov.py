"""KL-Cov (``algo.policy_loss=kl_cov``, Cui et al., arXiv 2505.22617): the top-k covariance tokens take
``kl_coef |log pi_theta - log pi_old|`` on top of PPO's clipped loss, hand-computed values and gradients, seed-prefix
tokens never penalised, the settings refused out of range or idle, and a micro train whose metrics.jsonl logs
``penalised`` by source."""

import json
import math

import pytest
import torch

from loss_terms import policy_term
from tsctl.algo.aggregations import loss_norms
from tsctl.algo.kl_cov import KlCovSettings
from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config

CLIP = {"clip_low": 0.2, "clip_high": 0.28}
LOG_RATIO = torch.tensor([[0.1, 0.0, 0.0], [0.0, 0.0, -0.1]])
"""log r_t = log pi_theta - log pi_old of the hand batch."""


def run(settings, prefix=None):
    """2x3, every token a loss token; row 0 A = +1 with log pi (-1, -2, -3), row 1 A = -1 with log pi (-1, -2, -6)."""
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -2.0, -6.0]], requires_grad=True)
    old, adv, mask = logprobs.detach() - LOG_RATIO, torch.tensor([1.0, -1.0]), torch.ones(2, 3, dtype=torch.bool)
    prefix = torch.zeros_like(mask) if prefix is None else prefix
    token_norm, seq_norm = loss_norms(mask)
    loss, m = policy_term("dapo", logprobs, old, adv, mask, policy_loss="kl_cov", prefix=prefix, settings=settings,
                          token_norm=token_norm, seq_norm=seq_norm, **CLIP)
    loss.backward()
    return loss, m, logprobs.grad


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
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, idle=True)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0, 25])
def test_a_micro_train_logs_the_penalised_share_by_source(micro, tmp_path, ratio):
    from tsctl.stages.train import train

    name = f"kl_cov_{ratio}"
    train(compose_config([*micro, f"name={name}", f"ratio={ratio}", "algo.policy_loss=kl_cov", "algo.kl_cov.k_ratio=0.1",
                          "trainer.eval_every=0"], idle=True))
    run = tmp_path / "runs" / "default" / name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and all(math.isfinite(r["pg_loss"]) for r in records)
    # floor(0.1 x N) (at least 1) of each micro-batch's N suffix and plain tokens: about a tenth of them, never none.
    assert all(0 < r["penalised"] <= 0.2 and 0 <= r["penalised_by_source/plain"] <= 1 for r in records)
    if ratio:
        assert all(r["penalised_by_source/prefix"] == 0 and 0 <= r["penalised_by_source/suffix"] <= 1 for r in records)
    else:
        assert all(r["penalised_by_source/plain"] == r["penalised"] for r in records)
        assert not any(key.startswith(("penalised_by_source/prefix", "penalised_by_source/suffix")) for r in records for key in r)
    assert "k_ratio: 0.1" in (run / "config.yaml").read_text()
