"""Rollout-side metrics of one step: rewards, lengths, entropy by position and source, seed stats."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from tsctl.algo.position_metrics import MetricSums, absolute_bins, relative_deciles, split_by_source
from tsctl.models.batch import RolloutBatch
from tsctl.models.samples import Sample


def rollout_metrics(samples: Sequence[Sample], batch: RolloutBatch, entropy: torch.Tensor, position_bins: list[int], step: int) -> dict[str, float]:
    """Metrics of the samples of a step and of pi_old's per-token ``entropy`` [B, T]."""
    rewards = np.array([s.reward for s in samples])
    groups = np.array([s.group for s in samples])
    per_group = [rewards[groups == g] for g in np.unique(groups)]
    lengths = np.array([len(s.response_ids) for s in samples])
    out = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()),
        "reward/answer_found": float(np.mean([s.answer_found for s in samples])),
        "accuracy": float((rewards >= 1.0).mean()),
        "zero_variance_groups": float(np.mean([g.std() == 0 for g in per_group])),
        "response_length/mean": float(lengths.mean()),
        "response_length/max": float(lengths.max()),
        "truncation_rate": float(np.mean([not s.finished for s in samples])),
    }
    sums = MetricSums()
    sums.add_tokens("entropy", entropy, batch.resp_mask)
    sums.add_pairs("entropy_by_pos", absolute_bins(entropy, batch.resp_mask, position_bins))
    sums.add_pairs("entropy_by_rel", relative_deciles(entropy, batch.resp_mask))
    by_source = split_by_source(entropy, batch.resp_mask, batch.source)
    sums.add_pairs("entropy_by_source", by_source)
    sums.add_pairs("tokens_by_source", {k: (count, batch.resp_mask.sum()) for k, (_, count) in by_source.items()})
    out.update(sums.means())
    seeded = [s for s in samples if s.seeded]
    if seeded:
        plain = [s for s in samples if not s.seeded]
        out["seeds/prefix_tokens"] = float(np.mean([len(s.prefix_ids) for s in seeded]))
        out["seeds/prefix_fraction"] = float(np.mean([len(s.prefix_ids) / len(s.response_ids) for s in seeded]))
        out["seeds/behaviour_age"] = float(np.mean([step - s.behaviour_step for s in seeded]))
        out["seeds/solve_rate_seeded"] = float(np.mean([s.reward >= 1.0 for s in seeded]))
        if plain:
            out["seeds/solve_rate_plain"] = float(np.mean([s.reward >= 1.0 for s in plain]))
    return out
