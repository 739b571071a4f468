"""Group-normalised advantages and DAPO's overlong penalty."""

import math

import pytest
import torch

from tsctl.algo.advantages import group_advantages, overlong_penalty


def test_all_equal_groups_are_exactly_zero():
    rewards = torch.tensor([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.7, 0.7, 0.7]])
    for norm in (True, False):
        adv = group_advantages(rewards, norm_by_std=norm)
        assert adv.shape == rewards.shape
        assert torch.equal(adv, torch.zeros_like(rewards))


def test_all_equal_group_next_to_a_mixed_one():
    rewards = torch.tensor([0.3, 1.0, 0.3, 0.0, 0.3, 1.0])
    index = [7, 2, 7, 2, 7, 2]
    adv = group_advantages(rewards, index)
    assert torch.equal(adv[[0, 2, 4]], torch.zeros(3))
    assert torch.isfinite(adv).all()


def test_std_vs_no_std_hand_values():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    std = math.sqrt(1.0 / 3.0)  # unbiased: sum((r - 0.5)^2) / (4 - 1) = 1/3
    expected = torch.tensor([[0.5, -0.5, -0.5, 0.5]]) / (std + 1e-6)
    torch.testing.assert_close(group_advantages(rewards, norm_by_std=True), expected)
    torch.testing.assert_close(group_advantages(rewards, norm_by_std=False), torch.tensor([[0.5, -0.5, -0.5, 0.5]]))


def test_scattered_group_ids_by_hand():
    # Groups 5, 1, 9 interleaved. Group 5: rewards 0, 2 (mean 1, unbiased std sqrt(2)); group 1: 1, 1
    # (std 0: advantages exactly 0); group 9: 3, 5, 7 (mean 5, unbiased std 2).
    rewards = torch.tensor([0.0, 1.0, 3.0, 2.0, 1.0, 5.0, 7.0])
    index = torch.tensor([5, 1, 9, 5, 1, 9, 9])
    a = 1.0 / (math.sqrt(2.0) + 1e-6)
    b = 2.0 / (2.0 + 1e-6)
    expected = torch.tensor([-a, 0.0, -b, a, 0.0, 0.0, b])
    torch.testing.assert_close(group_advantages(rewards, index, eps=1e-6), expected)


def test_grid_and_flat_forms_agree():
    torch.manual_seed(1)
    rewards = torch.rand(4, 6)
    flat = group_advantages(rewards.flatten(), torch.arange(4).repeat_interleave(6))
    torch.testing.assert_close(group_advantages(rewards).flatten(), flat)


def test_stats_mask_excludes_samples_from_statistics():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    stats = torch.tensor([True, True, False, False])
    adv = group_advantages(rewards, [0, 0, 0, 0], stats_mask=stats, eps=0.0)
    s = 1.0 / math.sqrt(2.0)  # mean 0.5, unbiased std of [1, 0] = sqrt(0.5)
    torch.testing.assert_close(adv, torch.tensor([s, -s, s, s]))
    # with every sample in the statistics the values differ
    assert not torch.allclose(group_advantages(rewards, [0, 0, 0, 0], eps=0.0), adv)


def test_stats_group_all_equal_falls_back_to_the_whole_groups_std():
    # Group 0: plain rewards [0, 0] (std 0), seeded 1. Centred by the plain mean 0, scaled by the
    # std of all three, [0, 0, 1]: mean 1/3, unbiased variance (1/9 + 1/9 + 4/9) / 2 = 1/3.
    # Group 1: plain [0, 1] (std sqrt(1/2)), seeded 1: scaled by the plain std as before.
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    stats = torch.tensor([True, True, False, True, True, False])
    adv = group_advantages(rewards, [0, 0, 0, 1, 1, 1], stats_mask=stats, eps=0.0)
    r2 = math.sqrt(2.0)
    torch.testing.assert_close(adv, torch.tensor([0.0, 0.0, math.sqrt(3.0), -1 / r2, 1 / r2, 1 / r2], dtype=torch.float64))
    # eps is added to the fallback std as to any other
    eps = group_advantages(rewards, [0, 0, 0, 1, 1, 1], stats_mask=stats, eps=0.1)
    assert eps[2].item() == pytest.approx(1.0 / (1 / math.sqrt(3.0) + 0.1))


def test_stats_group_whose_every_reward_is_equal_stays_zero():
    rewards = torch.tensor([1.0, 1.0, 1.0])
    adv = group_advantages(rewards, [0, 0, 0], stats_mask=torch.tensor([True, False, False]))
    assert torch.equal(adv, torch.zeros(3))


def test_one_plain_sample_falls_back_to_the_whole_groups_std():
    # plain [1] (std 0 with one sample), seeded [0, 0]: centred by 1, scaled by std([1, 0, 0]) = 1/sqrt(3)
    rewards = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    adv = group_advantages(rewards, [0, 0, 0], stats_mask=torch.tensor([True, False, False]), eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([0.0, -math.sqrt(3.0), -math.sqrt(3.0)], dtype=torch.float64))


def test_single_sample_group_is_zero():
    adv = group_advantages(torch.tensor([0.4, 1.0, 0.0]), [0, 1, 1])
    assert adv[0].item() == 0.0


def test_group_without_stats_samples_raises():
    with pytest.raises(ValueError, match="no sample selected"):
        group_advantages(torch.tensor([1.0, 0.0, 1.0]), [0, 0, 1], stats_mask=torch.tensor([True, True, False]))


def test_shape_errors():
    with pytest.raises(ValueError, match=r"\[G, n\]"):
        group_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match="group_index shape"):
        group_advantages(torch.zeros(4), [0, 0, 1])


def test_overlong_penalty_ramp():
    lengths = torch.tensor([0, 6, 7, 8, 9, 10, 12])
    got = overlong_penalty(lengths, max_len=10, buffer=4, penalty=1.0)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]))
    torch.testing.assert_close(
        overlong_penalty(lengths, max_len=10, buffer=4, penalty=0.5), torch.tensor([0.0, 0.0, -0.125, -0.25, -0.375, -0.5, -0.5])
    )


def test_overlong_penalty_without_buffer_and_bad_buffer():
    got = overlong_penalty(torch.tensor([9, 10, 11]), max_len=10, buffer=0, penalty=1.0)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, -1.0]))
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1]), max_len=10, buffer=11, penalty=1.0)
