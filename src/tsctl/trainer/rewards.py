"""From graded samples to advantages: optional DAPO overlong penalty, then the estimator ``algo.adv_estimator``."""

from __future__ import annotations

from typing import Sequence

import torch

from tsctl.algo.advantages import ADVANTAGES, overlong_penalty
from tsctl.config.schema import TsctlConfig
from tsctl.models.samples import Sample


def sample_advantages(samples: Sequence[Sample], cfg: TsctlConfig) -> torch.Tensor:
    """Advantages [B] of ``samples`` (groups by ``Sample.group``), as configured by ``algo`` (its estimator, the ``algo.*`` keys it reads and its settings block) and ``seeds.adv_group``."""
    al = cfg.algo
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float64)
    lengths = torch.tensor([len(s.response_ids) for s in samples])  # [B] response tokens, prefix included
    if al.overlong == "penalty":
        rewards = rewards + overlong_penalty(lengths, cfg.engine.max_new_tokens, al.overlong_buffer, al.overlong_penalty).double()
    stats_mask = torch.tensor([not s.seeded for s in samples]) if cfg.seeds.adv_group == "plain" else None
    arguments = ADVANTAGES.arguments(al.adv_estimator, al)
    if ADVANTAGES.needs(al.adv_estimator).lengths:
        arguments["lengths"] = lengths
    return ADVANTAGES.get(al.adv_estimator)(rewards, [s.group for s in samples], stats_mask=stats_mask, **arguments)
