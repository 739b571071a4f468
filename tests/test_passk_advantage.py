"""Pass@k Training's analytic advantage (``algo.adv_estimator=passk``, ``algo.passk.k``; Chen et al., arXiv 2508.10751):
hand-computed groups, ``k = 1`` as GRPO with the population std, seeded samples under ``seeds.adv_group=plain``, the
refusals, and micro trains at ratio 0 and 25.

The paper's formulas, for a group of N binary rewards with N_pos correct and N_neg = N - N_pos wrong:
    R = 1 - C(N_neg, k) / C(N, k),  sigma = sqrt(R (1 - R)),
    A_pos = (1 - R) / sigma,  A_neg = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma.
"""

import json
import math

import pyarrow.parquet as pq
import pytest
import torch

from tsctl.algo.advantages import ADVANTAGES
from tsctl.algo.passk_advantage import PasskSettings, passk_advantages
from tsctl.config.errors import ConfigError
from tsctl.runconfig import compose_config

K2 = PasskSettings(k=2)


def test_one_correct_of_four_at_k_2_by_hand():
    # N = 4, k = 2, N_pos = 1, N_neg = 3: R = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2; sigma = sqrt(1/2 * 1/2) = 1/2;
    # A_pos = (1 - 1/2) / (1/2) = 1; A_neg = (1 - 1/2 - C(2,1)/C(3,1)) / (1/2) = (1/2 - 2/3) * 2 = -1/3.
    adv = passk_advantages(torch.tensor([0.0, 1.0, 0.0, 0.0]), [0, 0, 0, 0], settings=K2)
    torch.testing.assert_close(adv, torch.tensor([-1 / 3, 1.0, -1 / 3, -1 / 3]))
    # the group's advantages sum to 0 (1 + 3 * (-1/3)); GRPO would give the wrong ones -1/sqrt(3), three times as heavy
    assert adv.sum().item() == pytest.approx(0.0, abs=1e-7)


def test_two_correct_of_four_at_k_2_by_hand():
    # N_neg = 2: R = 1 - C(2,2)/C(4,2) = 5/6; sigma = sqrt(5/6 * 1/6) = sqrt(5)/6; A_pos = (1/6) / (sqrt(5)/6) = 1/sqrt(5);
    # A_neg = (1/6 - C(1,1)/C(3,1)) / (sqrt(5)/6) = (1/6 - 1/3) * 6/sqrt(5) = -1/sqrt(5).
    s = 1 / math.sqrt(5.0)
    adv = passk_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64), [3, 3, 3, 3], settings=K2)
    torch.testing.assert_close(adv, torch.tensor([s, -s, s, -s], dtype=torch.float64))


def test_sigma_zero_groups_are_exactly_zero():
    # three correct of four at k = 2: N_neg = 1 < k, every pair holds a correct one, R = 1, sigma = 0; none correct: R = 0
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = passk_advantages(rewards, [0] * 4 + [1] * 4 + [2] * 4, settings=K2)
    assert torch.equal(adv, torch.zeros(12))


def test_k_1_is_grpo_with_the_population_std():
    # One correct of four: mean 1/4, population variance 1/4 * 3/4 = 3/16, std sqrt(3)/4; (1 - 1/4) / (sqrt(3)/4) = sqrt(3),
    # (0 - 1/4) / (sqrt(3)/4) = -1/sqrt(3). The formulas at k = 1: R = 1 - N_neg/N = 1/4, A_neg = (1 - R - 1) / sigma.
    one = PasskSettings(k=1)
    adv = passk_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), [0, 0, 0, 0], settings=one)
    torch.testing.assert_close(adv, torch.tensor([math.sqrt(3.0), -1 / math.sqrt(3.0), -1 / math.sqrt(3.0), -1 / math.sqrt(3.0)]))
    rewards = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0, 1], dtype=torch.float64)
    groups = torch.arange(2).repeat_interleave(8)
    want = torch.cat([(g - g.mean()) / g.std(unbiased=False) for g in rewards.split(8)])
    torch.testing.assert_close(passk_advantages(rewards, groups, settings=one), want)


def test_seeded_samples_outside_the_plain_statistics():
    # Plain [1, 0, 0, 0] as the first test (R = 1/2, sigma = 1/2: 1 and -1/3). A wrong seeded sample, outside the N = 4,
    # joins k - 1 = 1 plain sample, wrong with chance C(3,1)/C(4,1) = 3/4: (1 - 1/2 - 3/4) / (1/2) = -1/2; a right one 1.
    plain = torch.tensor([True, True, True, True, False, False])
    adv = passk_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.0]), [0] * 6, stats_mask=plain, settings=K2)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3, -0.5, 1.0]))


def test_plain_statistics_with_sigma_zero_fall_back_to_the_whole_group():
    # Plain [0, 0, 0] (R = 0) and a right seeded sample: the whole group [0, 0, 0, 1] is the first test's, -1/3 and 1.
    plain = torch.tensor([True, True, True, False])
    adv = passk_advantages(torch.tensor([0.0, 0.0, 0.0, 1.0]), [0] * 4, stats_mask=plain, settings=K2)
    torch.testing.assert_close(adv, torch.tensor([-1 / 3, -1 / 3, -1 / 3, 1.0]))
    # Plain [1, 1, 1] (R = 1) and a wrong seeded sample at k = 1: whole group R = 3/4, sigma = sqrt(3)/4: 1/sqrt(3), -sqrt(3)
    adv = passk_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), [0] * 4, stats_mask=plain, settings=PasskSettings(k=1))
    torch.testing.assert_close(adv, torch.tensor([1 / math.sqrt(3.0)] * 3 + [-math.sqrt(3.0)]))
    # ... and at k = 2 the whole group has N_neg = 1 < k: sigma 0 there too, every advantage 0
    adv = passk_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), [0] * 4, stats_mask=plain, settings=K2)
    assert torch.equal(adv, torch.zeros(4))


def test_refusals_of_the_function():
    with pytest.raises(ValueError, match="needs rewards 0 or 1; got 0.5"):
        passk_advantages(torch.tensor([1.0, 0.5, 0.0]), [0, 0, 0], settings=PasskSettings(k=1))
    with pytest.raises(ValueError, match="needs more than 2 statistics samples in each group; group 1 has 2"):
        passk_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0]), [0, 0, 0, 1, 1], settings=K2)


def test_the_registry_entry():
    needs = ADVANTAGES.needs("passk")
    assert ADVANTAGES.get("passk") is passk_advantages and needs.reads == () and needs.settings is PasskSettings and not needs.lengths


@pytest.mark.parametrize("overrides, key, words", [
    (["algo.adv_estimator=passk", "algo.passk.k=0"], "algo.passk.k", "0 must be > 0"),
    (["algo.adv_estimator=passk", "algo.passk.k=8"], "algo.passk.k", "8 must be below the trainer.n=8 samples of each group"),
    (["algo.adv_estimator=passk", "trainer.n=4"], "algo.passk.k", "4 must be below the trainer.n=4 samples"),
    (["algo.adv_estimator=passk", "algo.passk.k=6", "ratio=25", "seeds.adv_group=plain"], "algo.passk.k",
     "6 must be below the 6 plain samples of each group (seeds.adv_group=plain)"),
    (["algo.adv_estimator=passk", "algo.overlong=penalty"], "algo.overlong", "algo.adv_estimator=passk needs rewards 0 or 1"),
    (["algo.passk.k=2"], "algo.passk.k", "it is read only with algo.adv_estimator=passk"),
    (["algo.adv_estimator=passk", "algo.adv_eps=0.1"], "algo.adv_eps", "it is read only with algo.adv_estimator=grpo"),
])
def test_bad_settings_are_refused_in_one_line(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        compose_config(overrides, idle=True)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value)


def test_a_good_setting_composes():
    cfg = compose_config(["algo.adv_estimator=passk", "algo.passk.k=7", "ratio=25", "seeds.adv_group=all"], idle=False).cfg
    assert cfg.algo.passk == PasskSettings(k=7)


def paper(rewards: list[float], k: int) -> list[float]:
    """The paper's formulas for one group, written out again: rewards -> advantages (0 where sigma is 0)."""
    n, neg = len(rewards), sum(1 for r in rewards if r == 0)
    mean = 1 - math.comb(neg, k) / math.comb(n, k)
    sigma = math.sqrt(mean * (1 - mean))
    if sigma == 0:
        return [0.0] * n
    a_neg = (1 - mean - math.comb(neg - 1, k - 1) / math.comb(n - 1, k - 1)) / sigma
    return [(1 - mean) / sigma if r == 1 else a_neg for r in rewards]


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [["ratio=0"], ["ratio=25", "seeds.adv_group=plain"]])
def test_a_micro_train_writes_pass_at_k_advantages(micro, tmp_path, seeds):
    from tsctl.stages.train import train

    train(compose_config([*micro, "name=passk", *seeds, "algo.adv_estimator=passk", "algo.passk.k=2", "trainer.eval_every=0",
                          "trainer.save_rollouts=true"], idle=True))
    run = tmp_path / "runs" / "default" / "passk"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and all(math.isfinite(r["pg_loss"]) for r in records)
    assert "k: 2" in (run / "config.yaml").read_text()
    shards = sorted((run / "rollouts").glob("*.parquet"))
    assert len(shards) == 3
    informative = 0
    for shard in shards:
        table = pq.read_table(shard).to_pydict()
        rewards, advantages = table["reward"], table["advantage"]
        plain = [step == -1 for step in table["behaviour_step"]]
        assert sum(plain) == len(plain) - (len(plain) // 4 if seeds != ["ratio=0"] else 0)
        for group in sorted(set(table["group"])):
            rows = [i for i, g in enumerate(table["group"]) if g == group]
            got = [advantages[i] for i in rows]
            stats = [rewards[i] for i in rows if plain[i]]
            want = paper(stats, 2)  # the plain samples' advantages, from the plain samples alone
            if any(want):
                informative += 1
                assert [a for a, i in zip(got, rows) if plain[i]] == pytest.approx(want, abs=1e-6)
            elif seeds == ["ratio=0"]:
                assert got == [0.0] * len(rows)
            expected = passk_advantages(torch.tensor([rewards[i] for i in rows]), [0] * len(rows),
                                        stats_mask=torch.tensor([plain[i] for i in rows]), settings=K2)
            assert got == pytest.approx(expected.tolist(), abs=1e-6)
    assert informative > 0  # some group had both right and wrong answers, so the formulas were exercised
