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

A recomputed pi_old is never trusted silently against the engine's: :func:`logprob_gap` measures, per
step, how far the engine's log-probs of the tokens it generated are from the trainer's (the step
metrics ``logprob_gap/*``). A gap well above bf16 rounding means the engine samples from another
distribution than the one the update assumes (different weights, a nucleus, a numerics bug).
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine
from tsctl.models.precision import autocast, compute_dtype, model_device
from tsctl.trainer.batch import LOGITS_CHUNK_MIB, RolloutBatch, response_logprobs
from tsctl.trainer.micro_batches import micro_batches
from tsctl.trainer.samples import PREFIX, Sample


def from_engine(cfg: TsctlConfig, engine: Engine, model: PreTrainedModel) -> bool:
    """True when pi_old (and pi_b of new seeds) comes from the engine's own log-probs, per ``trainer.old_logprobs``."""
    mode = cfg.trainer.old_logprobs
    if mode == "auto":
        fp32 = next(model.parameters()).dtype == torch.float32 and compute_dtype(cfg, model) == torch.float32
        return bool(getattr(engine, "reports_token_stats", False)) and cfg.engine.top_p == 1 and fp32
    return mode == "engine"


def engine_stats(samples: Sequence[Sample], batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """pi_old log-probs [B, T] and entropies [B, T] of ``batch`` (packed from ``samples``) as the engine reported them.

    Prefix positions get log-prob 0: their ratio is taken against pi_b. Both live on the batch's device.
    """
    entropy = torch.zeros(batch.resp_mask.shape, dtype=torch.float32)
    for row, s in enumerate(samples):
        if len(s.entropies) != len(s.response_ids):
            raise ValueError("the engine reported no entropies for some samples; set trainer.old_logprobs=recompute")
        entropy[row, : len(s.entropies)] = torch.tensor(s.entropies, dtype=torch.float32)
    return engine_logprobs(samples, batch), entropy.to(batch.device)


def engine_logprobs(samples: Sequence[Sample], batch: RolloutBatch) -> torch.Tensor:
    """The engine's log-probs [B, T] of the generated tokens of ``batch`` (packed from ``samples``), 0 on prefix and padding."""
    logprobs = torch.zeros(batch.resp_mask.shape, dtype=torch.float32)
    for row, s in enumerate(samples):
        start = len(s.prefix_ids)
        logprobs[row, start : start + len(s.generated_logprobs)] = torch.tensor(s.generated_logprobs, dtype=torch.float32)
    return logprobs.to(batch.device)


def logprob_gap(engine: torch.Tensor, trainer: torch.Tensor, batch: RolloutBatch) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's, over the generated (non-prefix) tokens.

    Args:
        engine: [B, T] the engine's log-probs of the tokens it sampled (:func:`engine_logprobs`).
        trainer: [B, T] the trainer's recomputed pi_old log-probs of the same tokens.

    Returns:
        ``logprob_gap/abs_mean`` and ``logprob_gap/abs_max`` of ``engine - trainer``, its signed mean
        ``logprob_gap/mean``, and ``logprob_gap/ratio_mean``, the mean of ``exp(engine - trainer)``
        (1 when they agree); an empty dict when no token was generated.
    """
    generated = batch.resp_mask & (batch.source != PREFIX)
    diff = (engine - trainer)[generated].double()
    if diff.numel() == 0:
        return {}
    return {
        "logprob_gap/abs_mean": float(diff.abs().mean()),
        "logprob_gap/abs_max": float(diff.abs().max()),
        "logprob_gap/mean": float(diff.mean()),
        "logprob_gap/ratio_mean": float(diff.exp().mean()),
    }


def recompute(
    model: PreTrainedModel, batch: RolloutBatch, temperature: float, micro_batch_size: int = 0, entropy: bool = True,
    share_prompts: bool = True, micro_batch_tokens: int = 0, compute_dtype: torch.dtype | None = None,
    logits_chunk_mib: float = LOGITS_CHUNK_MIB,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """No-grad log-probs [B, T] (and entropies [B, T] when asked) of ``model``, on the batch's device.

    Micro-batched as the update is (:func:`~tsctl.trainer.micro_batches.micro_batches`: at most
    ``micro_batch_size`` rows, ``micro_batch_tokens`` padded tokens; 0 = no limit), computed under
    autocast to ``compute_dtype`` (None or float32: none). ``share_prompts`` and ``logits_chunk_mib``:
    as in :func:`~tsctl.trainer.batch.response_logprobs`.
    """
    T = batch.resp_mask.shape[1]
    logps = torch.zeros(batch.resp_mask.shape, dtype=torch.float32, device=batch.device)
    ents = torch.zeros(batch.resp_mask.shape, dtype=torch.float32, device=batch.device) if entropy else None
    lengths = batch.attention_mask.sum(1).tolist()
    with torch.no_grad(), autocast(model_device(model), compute_dtype):
        for idx in micro_batches(torch.arange(len(batch)), lengths, micro_batch_size, micro_batch_tokens):
            idx = idx.to(batch.device)
            sub = batch.rows(idx)
            lp, ent = response_logprobs(model, sub, temperature, with_entropy=entropy, share_prompts=share_prompts, logits_chunk_mib=logits_chunk_mib)
            logps[idx] = torch.nn.functional.pad(lp, (0, T - lp.shape[1]))
            if entropy:
                ents[idx] = torch.nn.functional.pad(ent, (0, T - ent.shape[1]))
    return logps, ents


def recompute_for(
    cfg: TsctlConfig, model: PreTrainedModel, batch: RolloutBatch, entropy: bool = True, micro_batch_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`recompute` with the trainer's settings of ``cfg`` (``micro_batch_size`` overrides the config's)."""
    tr = cfg.trainer
    return recompute(
        model, batch, cfg.engine.temperature or 1.0, tr.micro_batch_size if micro_batch_size is None else micro_batch_size,
        entropy=entropy, share_prompts=tr.share_prompts, micro_batch_tokens=tr.micro_batch_tokens,
        compute_dtype=compute_dtype(cfg, model), logits_chunk_mib=tr.logits_chunk_mib,
    )
