"""The registries of whole policy losses and advantage estimators: GSPO, RLOO and REINFORCE++ against hand-computed values,
the defaults (``vanilla``, ``grpo``) equal to the functions they wrap, and a micro train with each new entry."""

import json
import math

import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from tsctl.algo.advantages import ADVANTAGES, group_advantages
from loss_terms import policy_term
from tsctl.algo.losses import POLICY_LOSSES, dual_clip_bounds, ppo_clip, token_log_ratio
from tsctl.algo.reinforce_pp import reinforce_pp_advantages
from tsctl.algo.rloo import rloo_advantages
from tsctl.cli import app

CLIPS = dict(clip_low=0.2, clip_high=0.28)


def gspo_batch():
    """2x3: row 0 log-ratios (0.6, 0.3, 0.0), A = +1, all loss tokens; row 1 (-0.3, 0.0, 0.15), A = -2, last token masked."""
    old = torch.zeros(2, 3)
    logprobs = torch.tensor([[0.6, 0.3, 0.0], [-0.3, 0.0, 0.15]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    return logprobs, old, torch.tensor([1.0, -2.0]), mask


def test_gspo_clips_one_ratio_per_sequence_and_keeps_token_gradients():
    logprobs, old, adv, mask = gspo_batch()
    none = torch.zeros(2, 3, dtype=torch.bool)
    loss, m = policy_term("dapo", logprobs, old, adv, mask, policy_loss="gspo", prefix=none, **CLIPS, token_norm=5.0, seq_norm=2.0)
    # s_0 = exp(0.3) = 1.3499 > 1.28 with A > 0: every token clipped at -1.28; s_1 = exp(-0.15) = 0.8607 in range: 2 * s_1.
    s1 = math.exp(-0.15)
    assert m["ratio"][0].tolist() == pytest.approx([math.exp(0.3)] * 3) and m["ratio"][1, :2].tolist() == pytest.approx([s1] * 2)
    assert m["clip_high"][0].tolist() == [1.0, 1.0, 1.0] and m["clipped"][1].sum() == 0
    assert loss.item() == pytest.approx((3 * -1.28 + 2 * 2 * s1) / 5)
    loss.backward()  # d/d logp_t = -A s_i / token_norm on unclipped tokens; 0 on the clipped row and the masked token
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, 0.0, 0.0], [2 * s1 / 5, 2 * s1 / 5, 0.0]]))
    grpo, _ = policy_term("grpo", logprobs, old, adv, mask, policy_loss="gspo", prefix=none, **CLIPS, token_norm=5.0, seq_norm=2.0)
    assert grpo.item() == pytest.approx((-1.28 + 2 * s1) / 2)  # the paper's sequence-mean


def test_gspo_leaves_prefix_tokens_out_of_the_sequence_ratio():
    logprobs, old, adv, mask = gspo_batch()
    prefix = torch.tensor([[0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    per_token, m = POLICY_LOSSES.get("gspo")(logprobs, old, adv, mask, prefix=prefix, **CLIPS, clip_c=dual_clip_bounds(prefix, None, 3.0))
    # Row 1: s_1 over token 1 alone = exp(0) = 1 (loss 2); the prefix token keeps its own ratio exp(-0.3) = 0.741 < 0.8: 2 * 0.8.
    assert per_token[1, :2].tolist() == pytest.approx([1.6, 2.0]) and m["clip_low"][1].tolist() == [1.0, 0.0, 0.0]
    assert POLICY_LOSSES.needs("gspo").prefix_clip and POLICY_LOSSES.needs("vanilla").prefix_clip


def test_vanilla_is_ppo_clip_of_the_token_ratio_exactly():
    torch.manual_seed(0)
    logprobs, old = torch.randn(3, 5), torch.randn(3, 5)
    prefix = torch.rand(3, 5) < 0.4
    adv = torch.randn(3)
    clip_c = dual_clip_bounds(prefix, None, 3.0)
    got, got_m = POLICY_LOSSES.get("vanilla")(logprobs, old, adv, torch.ones(3, 5, dtype=torch.bool), prefix=prefix, **CLIPS, clip_c=clip_c)
    want, want_m = ppo_clip(token_log_ratio(logprobs, old), adv, **CLIPS, clip_c=clip_c)
    assert torch.equal(got, want) and all(torch.equal(got_m[k], want_m[k]) for k in want_m)


def test_rloo_on_a_group_of_four():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 1.0, 1.0])
    groups = [0, 0, 0, 0, 7, 7]
    # A_i = r_i - mean of the other three: 1 - 0.75/3, 0 - 1.75/3, 0.5 - 1.25/3, 0.25 - 1.5/3; a group of equal rewards: 0.
    want = [0.75, -1.75 / 3, 0.5 - 1.25 / 3, -0.25, 0.0, 0.0]
    assert rloo_advantages(rewards, groups).tolist() == pytest.approx(want)
    assert rloo_advantages(rewards, groups)[4:].tolist() == [0.0, 0.0]
    # Sample 0 seeded (seeds.adv_group=plain): its baseline is the mean of the three plain ones, theirs the other two.
    plain = torch.tensor([False, True, True, True, True, True])
    assert rloo_advantages(rewards, groups, stats_mask=plain).tolist() == pytest.approx([0.75, -0.375, 0.375, 0.0, 0.0, 0.0])
    assert rloo_advantages(torch.tensor([0.3, 0.9]), [0, 1]).tolist() == [0.0, 0.0]  # alone in its group: no baseline, 0
    assert ADVANTAGES.needs("rloo").reads == () and ADVANTAGES.get("rloo") is rloo_advantages


def test_grpo_estimator_is_group_advantages_exactly():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 1.0, 0.0], dtype=torch.float64)
    groups, plain = [0, 0, 0, 1, 1, 1], torch.tensor([False, True, True, True, True, False])
    for norm in (True, False):
        got = ADVANTAGES.get("grpo")(rewards, groups, stats_mask=plain, norm_adv_by_std=norm, adv_eps=1e-6)
        assert torch.equal(got, group_advantages(rewards, groups, norm_by_std=norm, eps=1e-6, stats_mask=plain))
    assert ADVANTAGES.needs("grpo").reads == ("norm_adv_by_std", "adv_eps")


def test_reinforce_pp_centres_by_group_then_whitens_over_tokens():
    # Group 0: rewards 1, 0, 0 (mean 1/3); group 1: 1, 1 (mean 1). Lengths 2, 4, 2, 3, 1: N = 12 tokens.
    # Centred: 2/3, -1/3, -1/3, 0, 0; token mean m = (4/3 - 4/3 - 2/3) / 12 = -1/18;
    # deviations 13/18, -5/18, -5/18, 1/18, 1/18; unbiased token variance (2*169 + 4*25 + 2*25 + 3 + 1) / 324 / 11.
    rewards, groups, lengths = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0]), [0, 0, 0, 1, 1], torch.tensor([2, 4, 2, 3, 1])
    scale = math.sqrt(492 / 324 / 11 + 1e-8)
    want = [13 / 18 / scale, -5 / 18 / scale, -5 / 18 / scale, 1 / 18 / scale, 1 / 18 / scale]
    assert reinforce_pp_advantages(rewards, groups, lengths=lengths).tolist() == pytest.approx(want, rel=1e-6)
    assert ADVANTAGES.needs("reinforce_pp_baseline").reads == () and ADVANTAGES.needs("reinforce_pp_baseline").lengths


def test_reinforce_pp_is_the_token_level_whitening_of_the_references():
    # verl / OpenRLHF: every response token carries its sample's centred return; mean and unbiased variance over the
    # masked tokens of the batch; (x - mean) * rsqrt(var + 1e-8).
    torch.manual_seed(0)
    rewards = torch.randint(0, 2, (12,)).double()
    groups, lengths = [g for g in range(3) for _ in range(4)], torch.randint(1, 9, (12,))
    mask = torch.arange(8)[None, :] < lengths[:, None]  # [12, 8]
    centred = rewards - torch.tensor([rewards[g * 4 : g * 4 + 4].mean() for g in groups], dtype=torch.float64)
    tokens = centred[:, None].expand(12, 8)[mask]
    mean, var = tokens.mean(), tokens.var(unbiased=True)
    want = (centred - mean) * torch.rsqrt(var + 1e-8)
    torch.testing.assert_close(reinforce_pp_advantages(rewards, groups, lengths=lengths), want)


def test_reinforce_pp_takes_group_means_over_the_plain_samples():
    # Group 0 plain samples 0.0, 0.0 (mean 0): the seeded sample's 1.0 stays 1.0; group 1 all plain, mean 0.5. One token each:
    # centred 1, 0, 0, 0.5, -0.5; mean 0.2; deviations 0.8, -0.2, -0.2, 0.3, -0.7; variance (0.64 + 0.04 + 0.04 + 0.09 + 0.49) / 4.
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0]), [0, 0, 0, 1, 1]
    plain = torch.tensor([False, True, True, True, True])
    scale = math.sqrt(1.3 / 4 + 1e-8)
    got = reinforce_pp_advantages(rewards, groups, stats_mask=plain, lengths=torch.ones(5))
    assert got.tolist() == pytest.approx([0.8 / scale, -0.2 / scale, -0.2 / scale, 0.3 / scale, -0.7 / scale], rel=1e-6)
    # One token in the batch: group-centred 0.5, -0.5, then only the token mean (0.5, the first sample's) subtracted.
    assert reinforce_pp_advantages(torch.tensor([1.0, 0.0]), [0, 0], lengths=torch.tensor([1, 0])).tolist() == [0.0, -1.0]


def test_a_micro_train_logs_reinforce_pp_advantages_that_are_whitened_over_its_tokens(micro, tmp_path):
    result = CliRunner().invoke(app, [
        "train", *micro, "algo.adv_estimator=reinforce_pp_baseline", "ratio=25", "trainer.steps=2", "trainer.eval_every=0",
        "trainer.save_rollouts=true", "name=x",
    ])
    assert result.exit_code == 0, result.output
    shards = sorted((tmp_path / "runs").rglob("rollouts/*.parquet"))
    assert len(shards) == 2
    for shard in shards:  # the references' token-level whitening, from the shard's own rewards, groups and lengths
        table = pq.read_table(shard).to_pydict()
        rewards, groups = torch.tensor(table["reward"], dtype=torch.float64), torch.tensor(table["group"])
        lengths = torch.tensor([len(r) for r in table["response_ids"]])
        centred = rewards - torch.stack([rewards[groups == g].mean() for g in groups])
        tokens = centred.repeat_interleave(lengths)
        want = (centred - tokens.mean()) * torch.rsqrt(tokens.var(unbiased=True) + 1e-8)
        torch.testing.assert_close(torch.tensor(table["advantage"], dtype=torch.float64), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("choice", ["algo.policy_loss=gspo", "algo.adv_estimator=rloo"])
def test_a_micro_train_with_each_new_entry(micro, tmp_path, choice):
    result = CliRunner().invoke(app, ["train", *micro, choice, "ratio=25", "trainer.steps=2", "trainer.eval_every=0", "name=x"])
    assert result.exit_code == 0, result.output
    [metrics] = (tmp_path / "runs").rglob("metrics.jsonl")
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows if "importance_ratio" in r or "loss" in r] and all(math.isfinite(v) for r in rows for v in r.values() if isinstance(v, float))
