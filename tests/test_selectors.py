"""Each behaviour selector's choice on constructed arm statistics (arm 0 = newest snapshot)."""

import math

import numpy as np
import pytest

from tsctl.config.schema import SeedsConfig
from tsctl.seeds.selectors import SELECTORS, ArmStats, select, ucb_arm


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


STATS = ArmStats(steps=[40, 30, 20], surprisal=[0.30, 0.41, 0.35], pulls=[10, 2, 5], rewards=[3.0, 0.4, 2.0])


def test_the_registry_holds_the_five_built_in_selectors():
    assert {"latest", "oldest", "uniform", "max_entropy", "bandit"} <= set(SELECTORS.names())  # more may be added, none pinned


def test_latest_and_oldest_pick_the_ends_of_the_pool_for_every_prompt():
    assert select("latest", STATS, 4, rng(), SeedsConfig()) == [0, 0, 0, 0]
    assert select("oldest", STATS, 4, rng(), SeedsConfig()) == [2, 2, 2, 2]
    assert select("oldest", ArmStats(steps=[0]), 2, rng(), SeedsConfig()) == [0, 0]  # the first window has one snapshot


def test_uniform_draws_each_arm_equally_often_and_repeats_with_the_same_seed():
    picks = np.array(select("uniform", STATS, 30000, rng(1), SeedsConfig()))
    shares = np.bincount(picks, minlength=3) / len(picks)
    np.testing.assert_allclose(shares, [1 / 3] * 3, atol=0.015)
    assert select("uniform", STATS, 50, rng(7), SeedsConfig()) == select("uniform", STATS, 50, rng(7), SeedsConfig())
    assert select("uniform", STATS, 50, rng(7), SeedsConfig()) != select("uniform", STATS, 50, rng(8), SeedsConfig())


def test_max_entropy_picks_the_most_surprised_snapshot_and_the_newest_of_ties():
    assert select("max_entropy", STATS, 3, rng(), SeedsConfig()) == [1, 1, 1]
    tied = ArmStats(steps=[4, 2, 0], surprisal=[0.4, 0.4, 0.1])
    assert select("max_entropy", tied, 2, rng(), SeedsConfig()) == [0, 0]
    with pytest.raises(ValueError, match="surprisal"):
        select("max_entropy", ArmStats(steps=[4, 2]), 1, rng(), SeedsConfig())


def test_ucb_tries_the_newest_untried_arm_first():
    assert ucb_arm(np.array([3.0, 0.0, 2.0]), np.array([1.0, 0.0, 5.0]), 1.0) == 1
    assert ucb_arm(np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.0, 9.0]), 1.0) == 0


def test_ucb_score_by_hand_and_the_exploration_constant_changes_the_choice():
    # N = 17, ln 17 = 2.833213. c = 1: 0.3 + sqrt(2*2.833213/10) = 1.0528, 0.2 + sqrt(2*2.833213/2) = 1.8832,
    # 0.4 + sqrt(2*2.833213/5) = 1.4646 -> arm 1 (the least tried). c = 0.1: 0.3753, 0.3683, 0.5065 -> arm 2.
    assert select("bandit", STATS, 3, rng(), SeedsConfig(bandit="ucb", bandit_c=1.0)) == [1, 1, 1]
    assert select("bandit", STATS, 3, rng(), SeedsConfig(bandit="ucb", bandit_c=0.1)) == [2, 2, 2]
    scores = [0.3 + math.sqrt(2 * math.log(17) / 10), 0.2 + math.sqrt(2 * math.log(17) / 2), 0.4 + math.sqrt(2 * math.log(17) / 5)]
    assert np.argmax(scores) == 1 and abs(scores[1] - 1.8832) < 1e-4


def test_thompson_follows_the_gaussian_posterior():
    # arm 0 untried: N(0, 1); arm 1: 3 samples earning 3.0 in all: N(3/4, 1/4).
    # P(arm 1) = P(N(0.75, 1.25) > 0) = Phi(0.75 / sqrt(1.25)) = Phi(0.6708) = 0.7488.
    stats = ArmStats(steps=[4, 2], pulls=[0, 3], rewards=[0.0, 3.0])
    picks = np.array(select("bandit", stats, 40000, rng(2), SeedsConfig(bandit="thompson", bandit_c=1.0)))
    assert abs(picks.mean() - 0.7488) < 0.01
    # A smaller prior scale sharpens the same posterior: Phi(0.75 / sqrt(0.25 * 1.25)) = Phi(1.3416) = 0.9101.
    sharp = np.array(select("bandit", stats, 40000, rng(3), SeedsConfig(bandit="thompson", bandit_c=0.5)))
    assert abs(sharp.mean() - 0.9101) < 0.01


def test_thompson_with_well_separated_arms_exploits_the_best():
    stats = ArmStats(steps=[4, 2, 0], pulls=[1000, 1000, 1000], rewards=[-500.0, 500.0, 0.0])
    assert select("bandit", stats, 200, rng(), SeedsConfig(bandit="thompson", bandit_c=1.0)) == [1] * 200


def test_unknown_names_and_an_empty_pool_are_refused():
    with pytest.raises(ValueError, match="unknown selector 'best'"):
        select("best", STATS, 1, rng(), SeedsConfig())
    with pytest.raises(ValueError, match="unknown bandit 'exp3'"):
        select("bandit", STATS, 1, rng(), SeedsConfig(bandit="exp3"))
    with pytest.raises(ValueError, match="empty"):
        select("latest", ArmStats(steps=[]), 1, rng(), SeedsConfig())
