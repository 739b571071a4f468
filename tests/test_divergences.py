"""The divergence of the KL term (``algo.kl_type``, DPH-RL arXiv 2509.07430's forward KL and JS beside k3): hand-computed
per-token values and gradients, each gradient the divergence's own in expectation over pi_theta's samples, the term in
the objective (seed-prefix tokens out), refusals, and micro trains."""

import json
import math

import pytest
import torch

from tsctl.algo.aggregations import loss_norms
from tsctl.algo.divergences import DIVERGENCES, forward_kl, jensen_shannon, kl_penalty_k3, reverse_kl
from tsctl.algo.objective import Objective, Tokens
from tsctl.config.errors import ConfigError
from tsctl.config.schema import AlgoConfig
from tsctl.runconfig import compose_config

LN2 = math.log(2.0)
# r = pi_ref / pi_theta of each token: 2 (pi_theta below pi_ref) and 0.5 (above)
REF = torch.tensor([[LN2 - 1.0, -LN2 - 1.0]])


def value_and_gradient(fn, ref=REF):
    """The per-token values of ``fn`` at log pi_theta = -1 and their derivatives with respect to log pi_theta."""
    logprobs = torch.full_like(ref, -1.0).requires_grad_()
    value = fn(logprobs, ref)
    value.sum().backward()
    return value.detach()[0].tolist(), logprobs.grad[0].tolist()


@pytest.mark.parametrize("fn, values, gradients", [
    # k3 = r - 1 - ln r: 2 - 1 - 0.693147 = 0.306853; 0.5 - 1 + 0.693147 = 0.193147. d/dlog pi_theta = 1 - r: -1, 0.5
    (kl_penalty_k3, [0.306853, 0.193147], [-1.0, 0.5]),
    # reverse: the k3 value; gradient log(pi_theta / pi_ref) = -ln r: -0.693147, 0.693147
    (reverse_kl, [0.306853, 0.193147], [-LN2, LN2]),
    # forward: r ln r - (r - 1): 2 * 0.693147 - 1 = 0.386294; 0.5 * -0.693147 + 0.5 = 0.153426. gradient 1 - r: -1, 0.5
    (forward_kl, [0.386294, 0.153426], [-1.0, 0.5]),
    # js: 1/2 [r ln r - (r + 1) ln((r + 1) / 2)]: 1/2 [1.386294 - 3 * 0.405465] = 0.084950;
    #     1/2 [-0.346574 - 1.5 * -0.287682] = 0.042475. gradient 1/2 ln(2 / (1 + r)): 1/2 ln(2/3) = -0.202733, 1/2 ln(4/3) = 0.143841
    (jensen_shannon, [0.084950, 0.042475], [-0.202733, 0.143841]),
])
def test_hand_computed_values_and_gradients_push_pi_theta_toward_pi_ref(fn, values, gradients):
    got_values, got_gradients = value_and_gradient(fn)
    assert got_values == pytest.approx(values, abs=1e-5)
    assert got_gradients == pytest.approx(gradients, abs=1e-5)
    # descent raises log pi_theta where it is below pi_ref (r = 2) and lowers it where above (r = 0.5)
    assert got_gradients[0] < 0 < got_gradients[1]


def test_the_registry_names_each_divergence_and_k3_is_the_default():
    assert {"k3", "reverse", "forward", "js"} <= set(DIVERGENCES.names())
    assert DIVERGENCES.get("k3") is kl_penalty_k3 and AlgoConfig().kl_type == "k3"


def test_far_below_pi_ref_k3_gives_no_gradient_and_forward_pulls_at_its_cap():
    # r = e^5 = 148.4: k3 = 148.4 - 1 - 5 > 10, clamped (gradient 0); forward's value clamps at 10, its gradient 1 - 10 = -9;
    # js: 1/2 ln(2 / (1 + e^5)) = 1/2 (0.693147 - 5.006715) = -2.156784
    ref = torch.tensor([[4.0]])
    assert value_and_gradient(kl_penalty_k3, ref) == ([10.0], [0.0])
    assert value_and_gradient(forward_kl, ref) == ([10.0], [-9.0])
    assert value_and_gradient(jensen_shannon, ref)[1] == pytest.approx([-2.156784], abs=1e-5)


def exact(name, log_pi, log_ref):
    """The divergence ``name`` between two categorical distributions, in closed form."""
    pi, ref = log_pi.exp(), log_ref.exp()
    m = (pi + ref) / 2
    return {
        "forward": (ref * (log_ref - log_pi)).sum(),
        "reverse": (pi * (log_pi - log_ref)).sum(),
        "js": 0.5 * (ref * (log_ref - m.log())).sum() + 0.5 * (pi * (log_pi - m.log())).sum(),
    }[name]


@pytest.mark.parametrize("entry, divergence", [("forward", "forward"), ("js", "js"), ("reverse", "reverse"), ("k3", "forward")])
def test_each_gradient_in_expectation_over_pi_theta_is_the_divergence_gradient(entry, divergence):
    # Over a 4-token vocabulary, sum_x pi(x) * d penalty(x) / d theta (the expected gradient of the per-token loss over
    # pi_theta's samples) against the gradient of the closed-form divergence; ratios stay in [0.2, 5], inside every
    # bound. k3, used as a loss, has the forward KL's gradient.
    logits = torch.tensor([0.3, -1.2, 0.8, 0.0], requires_grad=True)
    log_ref = torch.log_softmax(torch.tensor([-0.5, 0.4, 0.1, -0.2]), 0)
    log_pi = torch.log_softmax(logits, 0)
    expected = (log_pi.exp().detach() * DIVERGENCES.get(entry)(log_pi[None], log_ref[None])[0]).sum()
    (surrogate,) = torch.autograd.grad(expected, logits)
    (true,) = torch.autograd.grad(exact(divergence, torch.log_softmax(logits, 0), log_ref), logits)
    torch.testing.assert_close(surrogate, true, rtol=1e-5, atol=1e-6)
    other = "forward" if divergence == "reverse" else "reverse"  # the case tells the divergences apart
    (theirs,) = torch.autograd.grad(exact(other, torch.log_softmax(logits, 0), log_ref), logits)
    assert (surrogate - theirs).abs().max() > 0.01 and surrogate.abs().max() > 0.02


def test_the_objective_adds_the_chosen_divergence_over_suffix_and_plain_tokens_only():
    # Row: a prefix token (r = e, out of the term), then r = 2 and 0.5; advantage 0, so the policy term is 0.
    # loss = kl_coef * (js(2) + js(0.5)) / 3 loss tokens = 0.5 * (0.084950 + 0.042475) / 3 = 0.0212375
    objective = Objective(AlgoConfig(kl_coef=0.5, kl_type="js"), seeded=True)
    logprobs = torch.full((1, 3), -1.0, requires_grad=True)
    mask, prefix = torch.ones(1, 3, dtype=torch.bool), torch.tensor([[True, False, False]])
    ref = torch.tensor([[0.0, LN2 - 1.0, -LN2 - 1.0]])
    loss = objective.loss(Tokens(logprobs, logprobs.detach(), torch.zeros(1), mask, prefix, ref=ref), loss_norms(mask))
    assert loss.value.item() == pytest.approx(0.5 * (0.084950 + 0.042475) / 3, abs=1e-6)
    loss.value.backward()
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, 0.5 * -0.202733 / 3, 0.5 * 0.143841 / 3], abs=1e-6)
    assert loss.kl[0][0, 1:].tolist() == pytest.approx([0.084950, 0.042475], abs=1e-5) and loss.kl[1].tolist() == [[False, True, True]]


@pytest.mark.parametrize("overrides, key, words", [
    (["algo.kl_type=js"], "algo.kl_type", "algo.kl_coef=0 has no KL term"),
    (["algo.kl_coef=0.1", "algo.kl_type=tv"], "algo.kl_type", "choose one of k3, reverse, forward, js"),
])
def test_a_divergence_without_a_kl_term_or_unknown_is_refused(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, idle=True)
    assert err.value.key == key and words in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("ratio, kl_type", [(0, "js"), (25, "forward")])
def test_a_micro_train_with_a_mass_covering_divergence(micro, tmp_path, ratio, kl_type):
    from tsctl.stages.train import train

    train(compose_config([*micro, "name=div", f"ratio={ratio}", "algo.kl_coef=0.1", f"algo.kl_type={kl_type}", "trainer.eval_every=0"], idle=True))
    run = tmp_path / "runs" / "default" / "div"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(math.isfinite(r["pg_loss"]) and 0 <= r["kl_ref"] <= 10 for r in records)
    assert records[-1]["kl_ref/max"] > 0  # the policy moved from the reference, and the term measured it
    assert f"kl_type: {kl_type}" in (run / "config.yaml").read_text()
