"""The rollout correction (``algo.rollout_correction``): per-token weights of ``pi_old / pi_engine`` on the
policy-gradient term of suffix and plain tokens, ``tis`` capped and ``mis`` masked at ``algo.rollout_correction_cap``."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from conftest import metrics, tsctl
from test_logprob_gap import off_step, offset
from test_update import PAD, RecordingSGD, config, rows, tiny_model

from loss_terms import policy_term
from tsctl.algo.objective import Objective, Tokens
from tsctl.config.schema import AlgoConfig
from tsctl.algo.aggregations import loss_norms
from tsctl.algo.rollout_correction import CORRECTIONS, correction_weights
from tsctl.config.errors import ConfigError
from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.forward import Forward
from tsctl.models.samples import PLAIN, PREFIX, SUFFIX
from tsctl.runconfig import compose_config
from update_context import update, update_context

CLIPS = dict(clip_low=0.2, clip_high=0.28)


def weigh(mode: str, log_ratios: list[list[float]], correctable: list[list[bool]] | None = None, mask: list[list[bool]] | None = None, cap: float = 2.0):
    """Weights and metric means of ``mode`` for the log-ratios ``log(pi_old / pi_engine)`` given, [B, T]."""
    log_ratio = torch.tensor(log_ratios)
    old = torch.full_like(log_ratio, -1.5)
    on = torch.ones_like(log_ratio, dtype=torch.bool)
    weights, pairs = correction_weights(
        mode, old, old - log_ratio, on if mask is None else torch.tensor(mask), on if correctable is None else torch.tensor(correctable), cap,
    )
    return weights, {name: float(total) / float(count) for name, (total, count) in pairs.items() if count > 0}


@pytest.mark.parametrize("mode", ["tis", "mis"])
def test_agreeing_log_probs_give_weight_exactly_one_and_the_uncorrected_loss(mode):
    old = torch.tensor([[-0.3, -2.0, -7.5], [-1.1, -0.01, -4.0]])
    weights, pairs = correction_weights(mode, old, old.clone(), torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool), 2.0)
    assert torch.equal(weights, torch.ones(2, 3))
    assert [(float(s), int(c)) for s, c in pairs.values()] == [(6.0, 6), (0.0, 6)]
    logprobs = old + torch.tensor([[0.1, -0.4, 0.3], [0.0, 0.2, -0.1]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    token_norm, seq_norm = loss_norms(mask)
    loss = functools.partial(policy_term, "dapo")
    plain, _ = loss(logprobs, old, torch.tensor([1.0, -0.5]), mask, **CLIPS, token_norm=token_norm, seq_norm=seq_norm)
    weighted, _ = loss(logprobs, old, torch.tensor([1.0, -0.5]), mask, **CLIPS, token_norm=token_norm, seq_norm=seq_norm, weights=weights)
    assert torch.equal(plain, weighted)


def test_tis_caps_the_ratio_and_mis_masks_it_outside_its_bounds():
    # ratios 3, 0.25, 1.5, 1 with cap 2: tis min(r, 2) = 2, 0.25, 1.5, 1; mis keeps r in [0.5, 2] = 0, 0, 1.5, 1
    log_ratios = [[math.log(3.0), math.log(0.25), math.log(1.5), 0.0]]
    weights, means = weigh("tis", log_ratios)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 0.25, 1.5, 1.0]]))
    assert weights[0, 0].item() == 2.0  # the cap itself, not exp(log 2)
    assert means == pytest.approx({"weight_mean": (2.0 + 0.25 + 1.5 + 1.0) / 4, "corrected_share": 1 / 4})
    weights, means = weigh("mis", log_ratios)
    torch.testing.assert_close(weights, torch.tensor([[0.0, 0.0, 1.5, 1.0]]))
    assert means == pytest.approx({"weight_mean": (1.5 + 1.0) / 4, "corrected_share": 2 / 4})


def test_a_ratio_on_the_bound_is_neither_capped_nor_masked():
    # cap 4: ratios 4 and 1/4 sit on the bounds, 5 and 1/5 beyond them
    ratios = torch.tensor([4.0, 0.25, 5.0, 0.2])
    assert CORRECTIONS.get("tis")(ratios, 4.0).tolist() == pytest.approx([4.0, 0.25, 4.0, 0.2])
    assert CORRECTIONS.get("mis")(ratios, 4.0).tolist() == pytest.approx([4.0, 0.25, 0.0, 0.0])


@pytest.mark.parametrize("mode", ["tis", "mis"])
def test_prefix_and_out_of_mask_tokens_keep_weight_one_and_stay_out_of_the_metrics(mode):
    # Token 0 a prefix (ratio 3), token 1 outside the loss mask (ratio 1/20): weight 1 whatever their gap.
    # Counted: token 2 (ratio 3) and token 3 (ratio 1).
    log_ratios = [[math.log(3.0), math.log(0.05), math.log(3.0), 0.0]]
    weights, means = weigh(mode, log_ratios, correctable=[[False, True, True, True]], mask=[[True, False, True, True]])
    capped = {"tis": 2.0, "mis": 0.0}[mode]
    torch.testing.assert_close(weights, torch.tensor([[1.0, 1.0, capped, 1.0]]))
    assert means == pytest.approx({"weight_mean": (capped + 1.0) / 2, "corrected_share": 1 / 2})


def test_a_correction_without_corrected_tokens_logs_nothing():
    _, means = weigh("tis", [[math.log(3.0), 0.0]], correctable=[[False, False]])
    assert means == {}


@pytest.mark.parametrize("mode, loss_sum", [
    # Per-token clipped losses, row 0 (A = +1, ratios pi_theta/pi_old 1, 1.5, 0.5): -1, -1.28, -0.5;
    # row 1 (A = -2, ratios 0.5, 1.5, 1): max(1.0, 1.6) = 1.6, max(3.0, 2.56) = 3.0, 2.0.
    # Weights (log-ratios pi_old/pi_engine: prefix ln 3, ln 3, ln 0.25 | ln 1.5, 0, ln 0.6):
    #   tis: 1, 2, 0.25 | 1.5, 1, 0.6;  mis: 1, 0, 0 | 1.5, 1, 0.6;  none: all 1.
    ("none", -1.0 - 1.28 - 0.5 + 1.6 + 3.0 + 2.0),
    ("tis", -1.0 - 1.28 * 2 - 0.5 * 0.25 + 1.6 * 1.5 + 3.0 + 2.0 * 0.6),
    ("mis", -1.0 + 0.0 + 0.0 + 1.6 * 1.5 + 3.0 + 2.0 * 0.6),
])
def test_the_loss_of_a_hand_built_batch_is_the_weighted_token_mean(mode, loss_sum):
    ratios = torch.tensor([[1.0, 1.5, 0.5, 1.0], [0.5, 1.5, 1.0, 10.0]])
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.7, -1.2, -2.5, -0.1]])
    logprobs = (old + ratios.log()).requires_grad_()
    engine = old - torch.tensor([[math.log(3.0), math.log(3.0), math.log(0.25), 0.0], [math.log(1.5), 0.0, math.log(0.6), math.log(9.0)]])
    source = torch.tensor([[PREFIX, SUFFIX, SUFFIX, SUFFIX], [PLAIN] * 4])
    mask = torch.tensor([[True, True, True, False], [True, True, True, False]])  # row 0 ends in padding, row 1 too
    token_norm, seq_norm = loss_norms(mask)
    weights = None
    if mode != "none":
        weights, _ = correction_weights(mode, old, engine, mask, source != PREFIX, 2.0)
    loss, m = policy_term("dapo", logprobs, old, torch.tensor([1.0, -2.0]), mask, **CLIPS, token_norm=token_norm, seq_norm=seq_norm, weights=weights)
    assert loss.item() == pytest.approx(loss_sum / 6, abs=1e-6)  # a masked (mis) token still counts in the 6
    loss.backward()
    # d loss / d logprob = -A r w / 6 where the unclipped term is selected, 0 where the clip holds it
    w = {"none": [1.0] * 6, "tis": [1.0, 2.0, 0.25, 1.5, 1.0, 0.6], "mis": [1.0, 0.0, 0.0, 1.5, 1.0, 0.6]}[mode]
    expected = torch.tensor([[-1.0 * w[0], 0.0, -0.5 * w[2], 0.0], [0.0, 2 * 1.5 * w[4], 2 * 1.0 * w[5], 0.0]]) / 6
    torch.testing.assert_close(logprobs.grad, expected)
    torch.testing.assert_close(m["pg_loss"][0, :3], torch.tensor([-1.0, -1.28, -0.5]))  # logged before the weight


def update_grads(batch, cfg, old, engine, ref=None):
    """The gradients of every mini-batch of one ``policy_update`` at lr 0, and its metric means."""
    model = tiny_model()
    optimizer = RecordingSGD(model.parameters(), lr=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    sums = update(update_context(cfg, model, optimizer, scheduler), batch, old, ref, engine)
    return optimizer.grads, sums.means()


def pi_old(batch):
    return Forward(1.0).recompute(tiny_model(), batch)[0]


def test_the_update_leaves_prefix_tokens_alone_and_is_unchanged_where_the_engine_agrees():
    # The engine's log-probs equal pi_old on generated tokens and are 0 on prefix tokens, whose pi_b
    # (-2.5, -3.0) is far off: weighed, their ratio e^-2.5 would be masked by mis.
    batch = collate(rows(9, prefix=True), torch.linspace(-1, 1, 9), PAD)
    trainer = pi_old(batch)
    engine = torch.where(batch.source == PREFIX, 0.0, trainer)
    plain, none_means = update_grads(batch, config(3), pi_b_on_prefix(trainer, batch), engine)
    masked, means = update_grads(batch, config(3, rollout_correction="mis"), pi_b_on_prefix(trainer, batch), engine)
    for a, b in zip(plain, masked, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not any(k.startswith("rollout_correction/") for k in none_means)
    assert (means["rollout_correction/weight_mean"], means["rollout_correction/corrected_share"]) == (1.0, 0.0)


def test_the_weight_multiplies_the_policy_term_only():
    # pi_old / pi_engine = 3 on every token, tis cap 2: weight 2 everywhere. With advantages of +-1
    # the gradient doubles; with advantages 0 only the KL and entropy terms act, and they are not weighed.
    samples = rows(6)
    trainer = pi_old(collate(samples, torch.zeros(6), PAD))
    engine = trainer - math.log(3.0)
    batch = collate(samples, torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0]), PAD)
    plain, _ = update_grads(batch, config(2), trainer, engine)
    doubled, means = update_grads(batch, config(2, rollout_correction="tis"), trainer, engine)
    for a, b in zip(plain, doubled, strict=True):
        for x, y in zip(a, b):
            torch.testing.assert_close(y, 2 * x, rtol=1e-6, atol=0)
    assert means["rollout_correction/weight_mean"] == pytest.approx(2.0) and means["rollout_correction/corrected_share"] == 1.0
    batch = collate(samples, torch.zeros(6), PAD)
    ref = trainer + 0.5
    regularised = dict(kl_coef=0.1, entropy_coef=0.01)
    plain, _ = update_grads(batch, config(2, **regularised), trainer, engine, ref)
    weighted, _ = update_grads(batch, config(2, rollout_correction="tis", **regularised), trainer, engine, ref)
    assert any(bool(x.abs().max() > 0) for x in plain[0])
    for a, b in zip(plain, weighted, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_a_correction_without_the_engine_log_probs_is_refused():
    objective = Objective(AlgoConfig(rollout_correction="tis"), seeded=False)
    zeros, mask = torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="needs engine"):
        objective.loss(Tokens(zeros, zeros, torch.ones(1), mask, ~mask), loss_norms(mask))


@pytest.mark.parametrize("overrides, words", [
    (["algo.rollout_correction=is"], "choose one of none, tis, mis"),
    (["algo.rollout_correction=tis", "algo.rollout_correction_cap=0.5"], "0.5 must be >= 1"),
    (["algo.rollout_correction_cap=-2"], "must be >= 1"),
])
def test_config_mistakes_name_their_key(overrides, words):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides)
    assert err.value.key == overrides[-1].split("=")[0]
    assert words in str(err.value)


def test_the_default_is_off_and_every_registered_mode_is_accepted():
    algo = compose_config([]).cfg.algo
    assert (algo.rollout_correction, algo.rollout_correction_cap) == ("none", 2.0)
    assert {"tis", "mis"} <= set(CORRECTIONS.names())
    assert [compose_config([f"algo.rollout_correction={mode}"]).cfg.algo.rollout_correction for mode in CORRECTIONS.names()] == list(CORRECTIONS.names())
    assert compose_config(["algo.rollout_correction=mis", "algo.rollout_correction_cap=1"]).cfg.algo.rollout_correction_cap == 1.0


@pytest.mark.parametrize("mode, cap", [("tis", 1.1), ("mis", 1.2)])
def test_a_train_step_weighs_the_engine_gap_it_was_given(tmp_path, mode, cap):
    # The engine reports log-probs off by +0.3 (even tokens) and -0.1 (odd): pi_old / pi_engine is
    # e^-0.3 = 0.741 and e^0.1 = 1.105 on every generated token. tis at 1.1 caps the odd ones at 1.1;
    # mis at 1.2 keeps [0.833, 1.2]: it masks the even ones and keeps the odd ones' 1.105.
    record, drawn = off_step(tmp_path, f"algo.rollout_correction={mode}", f"algo.rollout_correction_cap={cap}")
    ratios = [math.exp(-offset(j)) for completions in drawn for c in completions for j in range(len(c.token_ids))]
    weights = [min(r, cap) if mode == "tis" else (r if r <= cap and r >= 1 / cap else 0.0) for r in ratios]
    assert record["rollout_correction/weight_mean"] == pytest.approx(sum(weights) / len(weights), abs=2e-4)
    assert record["rollout_correction/corrected_share"] == pytest.approx(sum(w != r for w, r in zip(weights, ratios)) / len(ratios))


@pytest.mark.slow
def test_train_logs_the_correction_and_the_engines_own_log_probs_weigh_one(micro, tmp_path):
    # The micro run's pi_old is the hf engine's own float32 log-probs: every ratio, so every weight, is 1.
    tsctl("train", *micro, "name=tis", "trainer.steps=2", "trainer.eval_every=0", "algo.rollout_correction=tis")
    records = metrics(tmp_path / "runs" / "default" / "tis")
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2
    for r in steps:
        assert (r["rollout_correction/weight_mean"], r["rollout_correction/corrected_share"]) == (1.0, 0.0)
