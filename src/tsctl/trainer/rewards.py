"""From graded samples to advantages: optional DAPO overlong penalty, then group normalisation."""

from __future__ import annotations

from typing import Sequence

import torch

from tsctl.algo.advantages import group_advantages, overlong_penalty
from tsctl.config.schema import TsctlConfig
from tsctl.models.samples import Sample


def sample_advantages(samples: Sequence[Sample], cfg: TsctlConfig) -> torch.Tensor:
    """Advantages [B] of ``samples`` (groups by ``Sample.group``), as configured by ``algo`` and ``seeds.adv_group``."""
    al = cfg.algo
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float64)
    if al.overlong == "penalty":
        lengths = torch.tensor([len(s.response_ids) for s in samples])
        rewards = rewards + overlong_penalty(lengths, cfg.engine.max_new_tokens, al.overlong_buffer, al.overlong_penalty).double()
    stats_mask = torch.tensor([not s.seeded for s in samples]) if cfg.seeds.adv_group == "plain" else None
    return group_advantages(rewards, [s.group for s in samples], norm_by_std=al.norm_adv_by_std, eps=al.adv_eps, stats_mask=stats_mask)
