"""A step's samples as rollout-shard columns (what ``tsctl rollout`` and ``trainer.save_rollouts`` write)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from tsctl.io.shards import write_shard
from tsctl.models.samples import Sample


def rollout_columns(samples: Sequence[Sample], advantages: torch.Tensor, policy_step: int) -> dict[str, list]:
    """Columns of the ``rollout`` shard kind for ``samples`` (advantages [B] in sample order).

    ``logprobs`` holds, per token, the log-prob of the policy that generated it: pi_b's for prefix
    tokens, the sampler's for the rest.
    """
    return {
        "group": [s.group for s in samples],
        "prompt_id": [s.prompt_id for s in samples],
        "prompt_ids": [s.prompt_ids for s in samples],
        "response_ids": [s.response_ids for s in samples],
        "prefix_len": [len(s.prefix_ids) for s in samples],
        "logprobs": [s.prefix_logprobs + s.generated_logprobs for s in samples],
        "behaviour_checkpoint": [s.behaviour_checkpoint for s in samples],
        "behaviour_step": [s.behaviour_step for s in samples],
        "policy_step": [policy_step] * len(samples),
        "reward": [s.reward for s in samples],
        "advantage": advantages.tolist(),
        "finished": [s.finished for s in samples],
    }


def write_step_rollouts(folder: Path, step: int, samples: Sequence[Sample], advantages: torch.Tensor) -> Path:
    """Write step ``step``'s (0-based) samples to ``folder/step-<step + 1>.parquet`` (``trainer.save_rollouts``)."""
    folder.mkdir(parents=True, exist_ok=True)
    return write_shard(folder / f"step-{step + 1:06d}.parquet", "rollout", rollout_columns(samples, advantages, step), overwrite=True)
