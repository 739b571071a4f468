"""M2PO (``algo.stale_mask=m2po``, arXiv 2510.01161): the seed-prefix tokens of largest squared log-ratio against pi_b
masked until the mean over the rest is at most ``algo.m2po.threshold``; hand-computed masks, the masked policy term in
the objective (normaliser kept), refusals, and a micro train."""

import json
import math

import pytest
import torch

from tsctl.algo.aggregations import loss_norms
from tsctl.algo.m2po import M2poSettings, m2po
from tsctl.algo.objective import Objective, Tokens
from tsctl.config.errors import ConfigError
from tsctl.config.schema import AlgoConfig
from tsctl.runconfig import compose_config

TAU = M2poSettings()  # the paper's 0.04


def test_the_largest_squared_log_ratios_are_masked_until_the_mean_of_the_rest_is_within_tau():
    # M2 = 1/N sum (log r)^2 <= tau. Candidates' (log r)^2: 0.01, 0.25, 0.09 | 0.04, 0.01, 0.0025 (the 4th column is not
    # a candidate: its 0.81 neither counts nor is masked). All six: 0.4025 / 6 = 0.0671 > 0.04; without 0.25:
    # 0.1525 / 5 = 0.0305 <= 0.04, so only the 0.5 is masked.
    log_ratio = torch.tensor([[0.1, 0.5, -0.3, 0.9], [0.2, -0.1, 0.05, 0.9]])
    candidates = torch.tensor([[True, True, True, False], [True, True, True, False]])
    assert m2po(log_ratio, candidates, settings=TAU).tolist() == [[True, False, True, True], [True, True, True, True]]
    # tau 0.02: without 0.25 and 0.09: 0.0625 / 4 = 0.0156 <= 0.02 (without 0.25 alone 0.0305 is not)
    assert m2po(log_ratio, candidates, settings=M2poSettings(0.02)).tolist() == [[True, False, False, True], [True, True, True, True]]


def test_a_mean_on_the_threshold_is_kept_and_one_no_token_can_meet_masks_all():
    # (log r)^2 = 0.0625, 0.0625 with tau 0.0625: the mean is tau itself (<= tau), nothing masked; 0.09, 0.0625 with
    # tau 0.05: even the smallest alone exceeds it, every candidate is masked; no candidate: nothing to mask.
    settings = M2poSettings(0.05)
    assert m2po(torch.tensor([[0.25, -0.25]]), torch.ones(1, 2, dtype=torch.bool), settings=M2poSettings(0.0625)).tolist() == [[True, True]]
    assert m2po(torch.tensor([[0.3, -0.25, 3.0]]), torch.tensor([[True, True, False]]), settings=settings).tolist() == [[False, False, True]]
    assert m2po(torch.tensor([[3.0, 4.0]]), torch.zeros(1, 2, dtype=torch.bool), settings=TAU).tolist() == [[True, True]]


def test_the_objective_zeroes_the_masked_prefix_terms_and_keeps_them_in_the_normaliser():
    # Row: two prefix tokens, log r = 0.5 and 0.1 against pi_b, then a suffix token, log r = 0.6 against pi_old; A = +1.
    # vanilla: -A min(r, 1.28): -1.28 (r = 1.6487), -1.10517 (r = 1.10517), -1.28 (r = 1.8221).
    # m2po over the prefix: (0.25 + 0.01) / 2 = 0.13 > 0.04, without 0.25: 0.01 -> the first token is masked; the suffix
    # token's 0.36 is not a candidate. loss = (0 - 1.10517 - 1.28) / 3 (still 3 tokens); d/dlog pi = -r / 3 on the
    # unclipped token, 0 on the masked and the clipped ones.
    log_r = torch.tensor([[0.5, 0.1, 0.6]])
    old = torch.tensor([[-2.0, -1.0, -0.5]])
    logprobs = (old + log_r).requires_grad_()
    mask, prefix = torch.ones(1, 3, dtype=torch.bool), torch.tensor([[True, True, False]])
    tokens = Tokens(logprobs, old, torch.ones(1), mask, prefix)
    loss = Objective(AlgoConfig(stale_mask="m2po"), seeded=True).loss(tokens, loss_norms(mask))
    assert loss.value.item() == pytest.approx((-math.exp(0.1) - 1.28) / 3, abs=1e-6)
    loss.value.backward()
    assert logprobs.grad[0].tolist() == pytest.approx([0.0, -math.exp(0.1) / 3, 0.0], abs=1e-6)
    assert {k: (float(s), int(c)) for k, (s, c) in loss.stale.items()} == {"masked": (1.0, 2), "m2": pytest.approx((0.26, 2))}
    unmasked = Objective(AlgoConfig(), seeded=True).loss(tokens, loss_norms(mask))
    assert unmasked.value.item() == pytest.approx((-1.28 - math.exp(0.1) - 1.28) / 3, abs=1e-6) and unmasked.stale is None


@pytest.mark.parametrize("overrides, key, words", [
    (["algo.stale_mask=m2po"], "algo.stale_mask", "ratio=0"),
    (["ratio=25", "algo.m2po.threshold=0.1"], "algo.m2po.threshold", "it is read only with algo.stale_mask=m2po"),
    (["ratio=25", "algo.stale_mask=m2po", "algo.m2po.threshold=0"], "algo.m2po.threshold", "0.0 must be > 0"),
    (["ratio=25", "algo.stale_mask=m2po", "seeds.train_prefix=false"], "algo.stale_mask", "no seed-prefix token in the loss"),
    (["ratio=25", "algo.stale_mask=m3po"], "algo.stale_mask", "choose one of none, m2po"),
])
def test_m2po_without_stale_tokens_and_bad_settings_are_refused(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, idle=True)
    assert err.value.key == key and words in str(err.value)


def test_m2po_with_excluded_trace_tokens_is_refused(tmp_path):
    # seeds.source=traces with the default seeds.trace_logprobs=exclude: every prefix token leaves the loss, none to mask
    traces = tmp_path / "traces.jsonl"
    traces.write_text('{"question": "1+1", "response": "2"}\n')
    seeds = ["ratio=25", "seeds.source=traces", f"seeds.source_path={traces}"]
    with pytest.raises(ConfigError) as err:
        compose_config([*seeds, "algo.stale_mask=m2po"], idle=True)
    assert err.value.key == "algo.stale_mask" and "seeds.trace_logprobs=exclude no prefix token" in str(err.value)
    assert "set seeds.trace_logprobs=cap" in str(err.value) and "\n" not in str(err.value)
    assert compose_config([*seeds, "algo.stale_mask=m2po", "seeds.trace_logprobs=cap"], idle=True).cfg.algo.stale_mask == "m2po"


@pytest.mark.slow
def test_a_micro_train_with_m2po(micro, tmp_path):
    from tsctl.stages.train import train

    # a threshold of 1e-6 masks nearly every prefix token whose ratio moved at all
    train(compose_config([*micro, "name=m2po", "ratio=25", "algo.stale_mask=m2po", "algo.m2po.threshold=1e-6", "trainer.eval_every=0"], idle=True))
    run = tmp_path / "runs" / "default" / "m2po"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and all(math.isfinite(r["pg_loss"]) for r in records)
    assert all(0 <= r["m2po/masked"] <= 1 and r["m2po/m2"] >= 0 for r in records)
    assert max(r["m2po/masked"] for r in records) > 0
    assert "threshold: 1.0e-06" in (run / "config.yaml").read_text()
