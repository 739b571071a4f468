"""Sequence-level MIS (``algo.rollout_correction=seq_mis``): each corrected token weighed by its sequence's ratio
``prod_t pi_old / pi_engine`` inside ``[1/c, c]``, the whole sequence masked outside; hand-computed weights against
token-level ``mis``, and micro trains."""

import json
import math

import pytest
import torch

from tsctl.algo.rollout_correction import CORRECTIONS, correction_weights
from tsctl.runconfig import compose_config

# log(pi_old / pi_engine) per token. Row 0: a prefix token (ln 5, not corrected), then ln 1.5 and ln 2.
# Row 1: ln 1.5, ln 0.5, then a padding token outside the loss mask (ln 9).
LOG_RATIOS = torch.tensor([[math.log(5.0), math.log(1.5), math.log(2.0)], [math.log(1.5), math.log(0.5), math.log(9.0)]])
MASK = torch.tensor([[True, True, True], [True, True, False]])
CORRECTABLE = torch.tensor([[False, True, True], [True, True, True]])


def weigh(mode):
    old = torch.full_like(LOG_RATIOS, -1.0)
    weights, pairs = correction_weights(mode, old, old - LOG_RATIOS, MASK, CORRECTABLE, 2.0)
    return weights, {name: float(total) / float(count) for name, (total, count) in pairs.items()}


def test_a_sequence_outside_the_bounds_is_masked_whole_and_one_inside_weighs_its_ratio():
    # rho_0 = 1.5 * 2 = 3 > c = 2: both corrected tokens masked (the prefix's 5 is not in the product, its weight 1).
    # rho_1 = 1.5 * 0.5 = 0.75 in [0.5, 2]: both weigh 0.75 (the padding token's 9 is not in it, weight 1).
    # weight_mean = (0 + 0 + 0.75 + 0.75) / 4 = 0.375; corrected_share: row 0's two tokens, 2 / 4.
    weights, means = weigh("seq_mis")
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.0, 0.0], [0.75, 0.75, 1.0]]))
    assert means == pytest.approx({"weight_mean": 0.375, "corrected_share": 0.5})
    # token-level mis keeps each of them: 1.5, 2 (on the bound) | 1.5, 0.5 (on the bound)
    weights, means = weigh("mis")
    torch.testing.assert_close(weights, torch.tensor([[1.0, 1.5, 2.0], [1.5, 0.5, 1.0]]))
    assert means == pytest.approx({"weight_mean": (1.5 + 2.0 + 1.5 + 0.5) / 4, "corrected_share": 0.0})


def test_only_seq_mis_weighs_by_the_sequence_and_the_other_modes_are_unchanged():
    assert CORRECTIONS.needs("seq_mis").sequence and not CORRECTIONS.needs("mis").sequence and not CORRECTIONS.needs("tis").sequence
    assert compose_config(["algo.rollout_correction=seq_mis", "algo.rollout_correction_cap=3"]).cfg.algo.rollout_correction == "seq_mis"


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0, 25])
def test_a_micro_train_with_seq_mis_weighs_one_where_the_engine_is_pi_old(micro, tmp_path, ratio):
    from tsctl.stages.train import train

    # The micro run's pi_old is the hf engine's own float32 log-probs: every sequence ratio, so every weight, is 1.
    train(compose_config([*micro, "name=seq", f"ratio={ratio}", "algo.rollout_correction=seq_mis", "trainer.eval_every=0"], idle=True))
    records = [json.loads(line) for line in (tmp_path / "runs" / "default" / "seq" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["rollout_correction/weight_mean"] == pytest.approx(1.0, abs=1e-5) and r["rollout_correction/corrected_share"] == 0.0 for r in records)
