"""The policy update of one step: mini-batch optimiser steps with gradient accumulation.

The batch is shuffled once per epoch and split into ``trainer.mini_batches`` mini-batches; each is
one optimiser step. A mini-batch may be split into micro-batches of at most
``trainer.micro_batch_size`` rows and ``trainer.micro_batch_tokens`` padded tokens
(:mod:`tsctl.trainer.micro_batches`) whose losses are summed: every loss divides by the whole
mini-batch's normaliser, so the split changes neither the loss nor the gradient.

Forwards run under autocast to ``model.compute_dtype`` (bf16 on CUDA by default) while the
parameters, their gradients and AdamW's state stay float32 (:mod:`tsctl.models.precision`).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from tsctl.algo.losses import get_policy_loss, kl_penalty_k3, loss_norms
from tsctl.algo.position_metrics import MetricSums, absolute_bins, relative_deciles, split_by_source
from tsctl.config.schema import TsctlConfig
from tsctl.models.precision import autocast, compute_dtype
from tsctl.trainer.batch import RolloutBatch, forward_tokens, response_logprobs
from tsctl.trainer.micro_batches import micro_batches


def policy_update(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: RolloutBatch,
    old_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    cfg: TsctlConfig,
    generator: torch.Generator,
    ref_logprobs: torch.Tensor | None = None,
) -> MetricSums:
    """Run ``epochs x mini_batches`` optimiser steps on ``batch``; return the update's metrics.

    Args:
        batch: the step's samples, B rows.
        old_logprobs: [B, T] log-probs each ratio is taken against (pi_b on prefix tokens, pi_old elsewhere).
        loss_mask: [B, T] tokens that enter the loss.
        generator: shuffles the rows (part of the resumable RNG state).
        ref_logprobs: [B, T] frozen reference log-probs, needed when ``algo.kl_coef > 0``.
    """
    tr, al = cfg.trainer, cfg.algo
    loss_fn = get_policy_loss(al.loss)
    metrics = MetricSums()
    B = len(batch)
    mini = B // tr.mini_batches
    device = batch.device
    compute = compute_dtype(cfg, model)
    lengths = batch.attention_mask.sum(1).tolist()
    model.train()
    for _ in range(tr.epochs):
        order = torch.randperm(B, generator=generator)
        for m in range(tr.mini_batches):
            rows = order[m * mini : (m + 1) * mini]
            token_norm, seq_norm = loss_norms(loss_mask[rows.to(device)])
            optimizer.zero_grad(set_to_none=True)
            for idx in micro_batches(rows, lengths, tr.micro_batch_size, tr.micro_batch_tokens):
                idx = idx.to(device)
                sub = batch.rows(idx)
                T = sub.resp_mask.shape[1]
                mask, old = loss_mask[idx][:, :T], old_logprobs[idx][:, :T]
                with autocast(device, compute):
                    logprobs, entropy = response_logprobs(
                        model, sub, cfg.engine.temperature or 1.0, with_entropy=al.entropy_coef > 0,
                        share_prompts=tr.share_prompts, logits_chunk_mib=tr.logits_chunk_mib,
                    )
                loss, token_metrics = loss_fn(
                    logprobs, old, sub.advantages, mask,
                    clip_low=al.clip_low, clip_high=al.clip_high, clip_c=al.clip_c,
                    token_norm=token_norm, seq_norm=seq_norm,
                )
                if al.kl_coef > 0:
                    kl = kl_penalty_k3(logprobs, ref_logprobs[idx][:, :T])
                    loss = loss + al.kl_coef * (kl * mask).sum() / token_norm
                    metrics.add_tokens("kl_ref", kl, mask)
                if al.entropy_coef > 0:
                    loss = loss - al.entropy_coef * (entropy * mask).sum() / token_norm
                loss.backward()
                metrics.add("forward_token_share", forward_tokens(model, sub, tr.share_prompts), int(sub.attention_mask.sum()))
                _record(metrics, token_metrics, mask, sub, cfg)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tr.max_grad_norm or float("inf"))
            optimizer.step()
            scheduler.step()
            metrics.add("grad_norm", grad_norm.detach(), 1)
    model.eval()
    return metrics


def _record(metrics: MetricSums, token: dict[str, torch.Tensor], mask: torch.Tensor, sub: RolloutBatch, cfg: TsctlConfig) -> None:
    """Clip fractions and ratios overall, by token source and by position."""
    for name in ("clip_low", "clip_high", "clipped", "kl_k3", "pg_loss"):
        metrics.add_tokens(name, token[name], mask)
    metrics.add_tokens("ratio", token["ratio"], mask)
    metrics.add_pairs("clipped_by_source", split_by_source(token["clipped"], mask, sub.source))
    metrics.add_pairs("ratio_by_source", split_by_source(token["ratio"], mask, sub.source))
    metrics.add_pairs("clipped_by_pos", absolute_bins(token["clipped"], mask, cfg.trainer.position_bins, response_mask=sub.resp_mask))
    metrics.add_pairs("clipped_by_rel", relative_deciles(token["clipped"], mask, response_mask=sub.resp_mask))
    if cfg.ratio > 0:
        metrics.add_pairs("clipped_by_source_pos", absolute_bins(token["clipped"], mask, cfg.trainer.position_bins, source=sub.source, response_mask=sub.resp_mask))
