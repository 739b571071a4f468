"""A step's samples as rollout-shard columns (what ``tsctl rollout`` and ``trainer.save_rollouts`` write)."""

from __future__ import annotations

from typing import Sequence

import torch

from tsctl.trainer.samples import Sample


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
