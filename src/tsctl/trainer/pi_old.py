"""pi_old: the log-probs each importance ratio is taken against, and the entropies logged with them.

``trainer.old_logprobs`` picks the source:

- ``recompute``: a no-grad forward of the trainer's model over the packed batch before the update
  (micro-batched like the update);
- ``engine``: what the rollout engine reported while sampling (the drawn tokens' log-probs, the
  entropy at every generated and prefix token). No extra forward. It equals a recompute up to float
  rounding only when the engine runs the trainer's weights with the same numerics and samples from
  the full tempered distribution: the ``hf`` engine (``reports_token_stats``), ``top_p=1``, float32;
- ``auto``: ``engine`` where that holds, else ``recompute``.

Either way prefix tokens take their ratio against the stored pi_b log-probs
(:func:`tsctl.trainer.batch.old_logprobs`); seed shards take pi_b's log-probs from the same source.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine
from tsctl.trainer.batch import RolloutBatch, response_logprobs
from tsctl.trainer.samples import Sample


def from_engine(cfg: TsctlConfig, engine: Engine, model: PreTrainedModel) -> bool:
    """True when pi_old (and pi_b of new seeds) comes from the engine's own log-probs, per ``trainer.old_logprobs``."""
    mode = cfg.trainer.old_logprobs
    if mode == "auto":
        fp32 = next(model.parameters()).dtype == torch.float32
        return bool(getattr(engine, "reports_token_stats", False)) and cfg.engine.top_p == 1 and fp32
    return mode == "engine"


def engine_stats(samples: Sequence[Sample], batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """pi_old log-probs [B, T] and entropies [B, T] of ``batch`` (packed from ``samples``) as the engine reported them.

    Prefix positions get log-prob 0: their ratio is taken against pi_b.
    """
    logprobs = torch.zeros(batch.resp_mask.shape, dtype=torch.float32)
    entropy = torch.zeros(batch.resp_mask.shape, dtype=torch.float32)
    for row, s in enumerate(samples):
        if len(s.entropies) != len(s.response_ids):
            raise ValueError("the engine reported no entropies for some samples; set trainer.old_logprobs=recompute")
        start = len(s.prefix_ids)
        logprobs[row, start : start + len(s.generated_logprobs)] = torch.tensor(s.generated_logprobs, dtype=torch.float32)
        entropy[row, : len(s.entropies)] = torch.tensor(s.entropies, dtype=torch.float32)
    return logprobs, entropy


def recompute(
    model: PreTrainedModel, batch: RolloutBatch, temperature: float, micro_batch_size: int, entropy: bool = True,
    share_prompts: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """No-grad log-probs [B, T] (and entropies [B, T] when asked) of ``model``, ``micro_batch_size`` rows at a time (0: all).

    ``share_prompts``: as in :func:`~tsctl.trainer.batch.response_logprobs`.
    """
    size = micro_batch_size or len(batch)
    T = batch.resp_mask.shape[1]
    logps, ents = [], []
    with torch.no_grad():
        for start in range(0, len(batch), size):
            sub = batch.rows(torch.arange(start, min(start + size, len(batch))))
            lp, ent = response_logprobs(model, sub, temperature, with_entropy=entropy, share_prompts=share_prompts)
            pad = T - lp.shape[1]
            logps.append(torch.nn.functional.pad(lp, (0, pad)))
            if entropy:
                ents.append(torch.nn.functional.pad(ent, (0, pad)))
    return torch.cat(logps), (torch.cat(ents) if entropy else None)
