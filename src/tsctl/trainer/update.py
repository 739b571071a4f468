"""The policy update of one step: mini-batch optimiser steps with gradient accumulation.

The batch is shuffled once per epoch and split into ``trainer.mini_batches`` near-equal mini-batches
covering every row (sizes differ by at most one, e.g. 10 rows in 4 give 3, 3, 2, 2: dynamic sampling
may return a batch that does not divide; fewer rows than mini-batches give one row each); each is one
optimiser step with its own token normaliser. A mini-batch may be split into micro-batches of at most
``trainer.micro_batch_size`` rows and ``trainer.micro_batch_tokens`` padded tokens (real tokens with
``trainer.pack``) (:mod:`tsctl.models.micro_batches`) whose losses are summed: every loss divides by
the whole mini-batch's normaliser, so the split changes neither the loss nor the gradient. With
``trainer.pack`` each micro-batch's forward runs padding-free (:mod:`tsctl.models.packing`); its
log-probs and entropies come back in the same [B, T] layout, so nothing below changes.

The loss mask is built here, next to its normalisers (:func:`loss_mask`): every response token,
less the seed-prefix tokens when ``seeds.train_prefix`` is off, the rows cut at the length limit
when ``algo.overlong=mask``, and the prefix tokens of unknown pi_b when ``seeds.trace_logprobs=exclude``.

The per-token objective is ``algo.policy_loss`` and its aggregation ``algo.loss``
(:func:`~tsctl.algo.losses.get_policy_loss`). Seed-prefix tokens take their dual-clip constant from
``algo.prefix_clip_c`` (:func:`~tsctl.algo.losses.dual_clip_bounds`) when the objective declares ``prefix_clip``. The k3 KL penalty (``algo.kl_coef``) is applied to
suffix and plain tokens only: it estimates the KL from tokens sampled by the current policy, and
prefix tokens were sampled by pi_b. Its sum still divides by the mini-batch's token normaliser, so
each token's KL weighs as much as its policy term. Each mini-batch passes the non-finite guard
(:mod:`tsctl.trainer.nonfinite`) before and after its optimiser step.

With ``algo.rollout_correction`` (``tis``, ``mis``) each suffix and plain token's clipped policy term,
and nothing else (not the KL nor the entropy term, not the normalisers), is multiplied by its weight
of ``pi_old / pi_engine`` (:mod:`tsctl.algo.rollout_correction`): the engine's log-probs come in
``engine_logprobs``, and on those tokens ``old_logprobs`` is pi_old. Seed-prefix tokens keep weight 1:
their ratio is taken against the stored pi_b, and the seed shard keeps no engine log-probs of them.
Logged per step over the weighted tokens: ``rollout_correction/weight_mean`` and
``rollout_correction/corrected_share``. With ``none`` no weight is computed or logged.

Forwards run under autocast to ``model.compute_dtype`` (bf16 on CUDA by default) while the
parameters, their gradients and AdamW's state stay float32 (:mod:`tsctl.models.precision`).

Under ``torchrun`` (``parallel``, :mod:`tsctl.trainer.parallel`) every rank holds the whole batch and
shuffles it as one process does; it trains on its block of each mini-batch, dividing by the whole
mini-batch's normalisers, and FSDP2 sums the ranks' gradients; the loss the guard checks is the sum
over the ranks, the gradient norm the global one, and the metric sums are all-reduced at the end.
"""

from __future__ import annotations

from typing import Callable

import torch
from transformers import PreTrainedModel

from tsctl.algo.losses import POLICY_LOSSES, dual_clip_bounds, get_policy_loss, kl_penalty_k3, loss_norms
from tsctl.algo.position_metrics import MetricSums, absolute_bins, relative_deciles, split_by_source
from tsctl.algo.rollout_correction import correction_weights
from tsctl.config.schema import TsctlConfig
from tsctl.distributed.fsdp import full_tensor
from tsctl.distributed.world import all_reduce
from tsctl.models.batch import RolloutBatch
from tsctl.models.logprobs import forward_tokens, response_logprobs
from tsctl.models.micro_batches import micro_batches
from tsctl.models.precision import autocast, compute_dtype
from tsctl.models.samples import PREFIX
from tsctl.trainer.denominators import unknown_pi_b
from tsctl.trainer.nonfinite import NonFiniteGuard
from tsctl.trainer.parallel import Parallel


def loss_mask(batch: RolloutBatch, cfg: TsctlConfig) -> torch.Tensor:
    """The tokens that enter the loss and its token normaliser, [B, T] bool (see the module docstring)."""
    mask = batch.resp_mask.clone()
    if not cfg.seeds.train_prefix:
        mask &= batch.source != PREFIX
    if cfg.algo.overlong == "mask":
        mask &= batch.finished.unsqueeze(1)
    if cfg.seeds.trace_logprobs == "exclude":
        mask &= ~unknown_pi_b(batch)
    return mask


def policy_update(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: RolloutBatch,
    old_logprobs: torch.Tensor,
    cfg: TsctlConfig,
    generator: torch.Generator,
    ref_logprobs: torch.Tensor | None = None,
    guard: NonFiniteGuard | None = None,
    parallel: Parallel | None = None,
    engine_logprobs: torch.Tensor | None = None,
    *,
    seeded: bool,
) -> MetricSums:
    """Run ``epochs x mini_batches`` optimiser steps on ``batch``; return the update's metrics.

    Args:
        batch: the step's samples, B rows.
        old_logprobs: [B, T] log-probs each ratio is taken against (pi_b on prefix tokens, pi_old elsewhere).
        generator: shuffles the rows (part of the resumable RNG state).
        ref_logprobs: [B, T] frozen reference log-probs, needed when ``algo.kl_coef > 0``.
        guard: the run's non-finite guard (a fresh one per ``trainer.nonfinite`` when None).
        parallel: the ranks' split of the work (None: one process).
        engine_logprobs: [B, T] the engine's log-probs of the tokens it generated
            (:attr:`tsctl.trainer.pi_old.PiOld.engine_logprobs`), needed unless ``algo.rollout_correction=none``.
        seeded: whether the run is a Thinking Seeds run (:func:`tsctl.seeds.base.uses_seeds`): its prefix
            tokens are bounded by ``algo.prefix_clip_c`` (if the objective declares ``prefix_clip``) and its clip fractions logged by source and position.
    """
    tr, al = cfg.trainer, cfg.algo
    if al.rollout_correction != "none" and engine_logprobs is None:
        raise ValueError(f"algo.rollout_correction={al.rollout_correction} needs the engine's log-probs (engine_logprobs)")
    loss_fn = get_policy_loss(al.loss)
    guard = guard or NonFiniteGuard(tr.nonfinite, tr.max_nonfinite_skips)
    parallel = parallel or Parallel(model)
    temperature = cfg.engine.temperature or 1.0
    prefix_clip_c = al.prefix_clip_c if seeded and POLICY_LOSSES.needs(al.policy_loss).prefix_clip else None
    tokens = loss_mask(batch, cfg)
    metrics = MetricSums()
    B = len(batch)
    device = batch.device
    compute = compute_dtype(cfg, model)
    lengths = batch.attention_mask.sum(1).tolist()
    model.train()
    for _ in range(tr.epochs):
        order = torch.randperm(B, generator=generator)
        for m, rows in enumerate(torch.tensor_split(order, min(tr.mini_batches, B))):
            token_norm, seq_norm = loss_norms(tokens[rows.to(device)])
            optimizer.zero_grad(set_to_none=True)
            pending, loss_sum = MetricSums(), torch.zeros((), device=device)
            with parallel.accumulating():
                for idx in micro_batches(parallel.share(rows), lengths, tr.micro_batch_size, tr.micro_batch_tokens, packed=tr.pack):
                    idx = idx.to(device)
                    sub = batch.rows(idx)
                    T = sub.resp_mask.shape[1]
                    mask, old = tokens[idx][:, :T], old_logprobs[idx][:, :T]
                    weights = None
                    if al.rollout_correction != "none":
                        weights, correction = correction_weights(
                            al.rollout_correction, old, engine_logprobs[idx][:, :T], mask, sub.source != PREFIX, al.rollout_correction_cap,
                        )
                        pending.add_pairs("rollout_correction", correction)
                    with autocast(device, compute):
                        logprobs, entropy = parallel.forward(
                            response_logprobs, sub, temperature, with_entropy=al.entropy_coef > 0,
                            share_prompts=tr.share_prompts, logits_chunk_mib=tr.logits_chunk_mib, pack=tr.pack,
                        )
                    loss, token_metrics = loss_fn(
                        logprobs, old, sub.advantages, mask, policy_loss=al.policy_loss, prefix=sub.source == PREFIX,
                        clip_low=al.clip_low, clip_high=al.clip_high,
                        clip_c=dual_clip_bounds(sub.source == PREFIX, al.clip_c, prefix_clip_c),
                        token_norm=token_norm, seq_norm=seq_norm, weights=weights,
                    )
                    if al.kl_coef > 0:
                        kl_mask = mask & (sub.source != PREFIX)
                        kl = kl_penalty_k3(logprobs, ref_logprobs[idx][:, :T])
                        loss = loss + al.kl_coef * (kl * kl_mask).sum() / token_norm
                        pending.add_tokens("kl_ref", kl, kl_mask)
                    if al.entropy_coef > 0:
                        loss = loss - al.entropy_coef * (entropy * mask).sum() / token_norm
                    loss.backward()
                    loss_sum = loss_sum + loss.detach().float()
                    pending.add("forward_token_share", forward_tokens(model, sub, tr.share_prompts, tr.pack), int(sub.attention_mask.sum()))
                    _record(pending, token_metrics, mask, sub, cfg, prefix_clip_c, seeded)
            parallel.reduce_gradients(_probe(batch, device, compute, temperature, tr.logits_chunk_mib))
            loss_sum = all_reduce(loss_sum)
            params = [p for p in model.parameters() if p.grad is not None]
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # a DTensor under FSDP
            norm = full_tensor(grad_norm)
            if guard.admit(model, loss_sum, norm, m + 1):
                torch.nn.utils.clip_grads_with_norm_(params, tr.max_grad_norm or float("inf"), grad_norm)
                optimizer.step()
                guard.check_parameters(model, m + 1)
                scheduler.step()
                metrics.merge(pending)
                metrics.add("grad_norm", norm.detach(), 1)
            else:
                optimizer.zero_grad(set_to_none=True)
    optimizer.zero_grad(set_to_none=True)  # no gradient memory held while the engine generates
    if tr.nonfinite == "skip":
        metrics.add("nonfinite_skips", guard.skipped_this_step, 1)
    model.eval()
    # Over the ranks: token sums add up; grad_norm and nonfinite_skips, the same on every rank, keep their means.
    return metrics.all_reduce()


def _probe(batch: RolloutBatch, device: torch.device, compute: torch.dtype, temperature: float, chunk_mib: float) -> Callable[[torch.nn.Module], torch.Tensor]:
    """The forward every rank runs to end a mini-batch under FSDP (:func:`tsctl.distributed.fsdp.reduce_gradients`):
    the summed log-probs of the batch's first row, the same input on every rank."""

    def probe(model: torch.nn.Module) -> torch.Tensor:
        with autocast(device, compute):
            return response_logprobs(model, batch.rows(torch.zeros(1, dtype=torch.long)), temperature, share_prompts=False, logits_chunk_mib=chunk_mib)[0].sum()

    return probe


def _record(
    metrics: MetricSums, token: dict[str, torch.Tensor], mask: torch.Tensor, sub: RolloutBatch, cfg: TsctlConfig,
    prefix_clip_c: float | None, seeded: bool,
) -> None:
    """Clip fractions and ratios overall, by token source and by position (``prefix_clip_c``: the prefix tokens'
    dual-clip constant in this run, None when they have none)."""
    for name in ("clip_low", "clip_high", "clipped", "kl_k3", "pg_loss"):
        metrics.add_tokens(name, token[name], mask)
    if cfg.algo.clip_c is not None or prefix_clip_c is not None:
        metrics.add_tokens("clip_dual", token["clip_dual"], mask)
    metrics.add_tokens("ratio", token["ratio"], mask)
    metrics.add_pairs("clipped_by_source", split_by_source(token["clipped"], mask, sub.source))
    metrics.add_pairs("ratio_by_source", split_by_source(token["ratio"], mask, sub.source))
    metrics.add_pairs("clipped_by_pos", absolute_bins(token["clipped"], mask, cfg.trainer.position_bins, response_mask=sub.resp_mask))
    metrics.add_pairs("clipped_by_rel", relative_deciles(token["clipped"], mask, response_mask=sub.resp_mask))
    if seeded:
        metrics.add_pairs("clipped_by_source_pos", absolute_bins(token["clipped"], mask, cfg.trainer.position_bins, source=sub.source, response_mask=sub.resp_mask))
