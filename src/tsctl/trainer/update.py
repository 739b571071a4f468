"""The policy update of one step: mini-batch optimiser steps with gradient accumulation.

The batch is shuffled once per epoch and split into ``trainer.mini_batches`` near-equal mini-batches
covering every row (sizes differ by at most one, e.g. 10 rows in 4 give 3, 3, 2, 2: dynamic sampling
may return a batch that does not divide; fewer rows than mini-batches give one row each); each is one
optimiser step with its own token normaliser. A mini-batch may be split into micro-batches of at most
``trainer.micro_batch_size`` rows and ``trainer.micro_batch_tokens`` padded tokens (real tokens with
``trainer.pack``) (:meth:`tsctl.models.forward.Forward.micro_batches`) whose losses are summed: every loss divides by
the whole mini-batch's normaliser, so the split changes neither the loss nor the gradient. With
``trainer.pack`` each micro-batch's forward runs padding-free (:mod:`tsctl.models.packing`); its
log-probs and entropies come back in the same [B, T] layout, so nothing below changes.

The loss mask is built here, next to its normalisers (:func:`loss_mask`): every response token,
less the seed-prefix tokens when ``seeds.train_prefix`` is off, the rows cut at the length limit
when ``algo.overlong=mask``, and the prefix tokens of unknown pi_b when ``seeds.trace_logprobs=exclude``.

The loss of each micro-batch is the run's :class:`~tsctl.algo.objective.Objective` (built once from ``algo``): the
policy loss ``algo.policy_loss``, the rollout correction's weights, the KL and entropy terms, each aggregated by
``algo.loss`` with the mini-batch's normalisers. Its forward is the run's :class:`~tsctl.models.forward.Forward`
(packing, prompt sharing, the LM head's chunk, the micro-batch limits, autocast to ``model.compute_dtype``: bf16 on
CUDA by default while the parameters, their gradients and AdamW's state stay float32). Each mini-batch passes the
non-finite guard (:mod:`tsctl.trainer.nonfinite`) before and after its optimiser step. With ``trainer.compile``
the forwards run the policy's compiled decoder layers (:mod:`tsctl.models.compiled`). Logged per step: the policy
loss's metrics over the loss tokens, by source and position (an entry's own, such as ``masked``, overall and as
``<name>_by_source/<source>``); ``kl_ref`` over the KL's tokens; with a rollout correction,
``rollout_correction/weight_mean`` and ``rollout_correction/corrected_share``; with a stale-token mask,
``<name>/masked`` and ``<name>/m2`` (``m2po/masked``); with ``seeds.trace_logprobs=shaping``, ``shaped`` (the share of
loss tokens LUFFY's shaping trains, overall and ``shaped_by_source/<source>``).

Under ``torchrun`` (``parallel``, :mod:`tsctl.trainer.parallel`) every rank holds the whole batch and
shuffles it as one process does; it trains on its block of each mini-batch, dividing by the whole
mini-batch's normalisers, and FSDP2 sums the ranks' gradients; the loss the guard checks is the sum
over the ranks, the gradient norm the global one, and the metric sums are all-reduced at the end.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from tsctl.algo.aggregations import Norms, loss_norms
from tsctl.algo.losses import METRICS
from tsctl.algo.objective import Loss, Tokens
from tsctl.algo.position_metrics import MetricSums, absolute_bins, relative_deciles, split_by_source
from tsctl.config.rng import Stream, step_seed
from tsctl.config.schema import TsctlConfig
from tsctl.distributed.fsdp import full_tensor
from tsctl.distributed.world import all_reduce
from tsctl.models.batch import RolloutBatch
from tsctl.models.samples import PREFIX
from tsctl.seeds.base import uses_seeds
from tsctl.trainer.context import StepContext
from tsctl.trainer.denominators import unknown_pi_b
from tsctl.trainer.nonfinite import NonFiniteGuard
from tsctl.trainer.pi_old import PiOld


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


@dataclass
class _Step:
    """One update's batch and what its micro-batches slice from it (each ``[B, T]``), with its guard."""

    batch: RolloutBatch
    mask: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor | None
    engine: torch.Tensor | None
    guard: NonFiniteGuard
    draws: torch.Generator
    shaped: torch.Tensor | None

    def tokens(self, idx: torch.Tensor, sub: RolloutBatch, logprobs: torch.Tensor, entropy: torch.Tensor | None) -> Tokens:
        """The objective's inputs of the rows ``idx`` (the micro-batch ``sub``) with their forward's log-probs and entropies."""
        T = sub.resp_mask.shape[1]

        def cut(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[idx][:, :T]

        return Tokens(logprobs, cut(self.old), sub.advantages, cut(self.mask), sub.source == PREFIX, entropy, cut(self.ref), cut(self.engine), self.draws, cut(self.shaped))


def policy_update(ctx: StepContext, batch: RolloutBatch, pi_old: PiOld, ref: torch.Tensor | None, step: int) -> MetricSums:
    """Run ``trainer.epochs x trainer.mini_batches`` optimiser steps of the run ``ctx`` on ``batch``; return the update's metrics.

    Args:
        ctx: the run: its model, optimiser and schedule, :class:`~tsctl.algo.objective.Objective`,
            :class:`~tsctl.models.forward.Forward`, guard and ranks.
        batch: the step's samples, B rows.
        pi_old: the step's pi_old (:func:`tsctl.trainer.pi_old.step_pi_old`): its ratio denominators [B, T] (pi_b on
            prefix tokens, pi_old elsewhere) and the engine's log-probs [B, T] the rollout correction weighs against.
        ref: [B, T] frozen reference log-probs, needed when ``algo.kl_coef > 0``.
        step: the step (from 0): the rows are shuffled by its stream, and the policy loss draws from another (both
            part of the resumable RNG state).
    """
    tr = ctx.cfg.trainer
    guard = ctx.guard or NonFiniteGuard(tr.nonfinite, tr.max_nonfinite_skips)
    engine = pi_old.engine_logprobs if ctx.objective.corrects else None
    draws = torch.Generator().manual_seed(step_seed(ctx.cfg.seed, step, Stream.POLICY_LOSS))
    shaped = unknown_pi_b(batch) if ctx.objective.shaping_gamma is not None else None  # LUFFY's trace tokens
    whole = _Step(batch, loss_mask(batch, ctx.cfg), pi_old.denominators, ref, engine, guard, draws, shaped)
    shuffle = torch.Generator().manual_seed(step_seed(ctx.cfg.seed, step, Stream.SHUFFLE))
    metrics = MetricSums()
    ctx.model.train()
    for _ in range(tr.epochs):
        order = torch.randperm(len(batch), generator=shuffle)
        for m, rows in enumerate(torch.tensor_split(order, min(tr.mini_batches, len(batch)))):
            taken = _mini_batch(ctx, whole, rows, m + 1)
            if taken is not None:
                metrics.merge(taken)
    ctx.optimizer.zero_grad(set_to_none=True)  # no gradient memory held while the engine generates
    if tr.nonfinite == "skip":
        metrics.add("nonfinite_skips", guard.skipped_this_step, 1)
    ctx.model.eval()
    # Over the ranks: token sums add up; grad_norm and nonfinite_skips, the same on every rank, keep their means.
    return metrics.all_reduce()


def _mini_batch(ctx: StepContext, whole: _Step, rows: torch.Tensor, index: int) -> MetricSums | None:
    """The optimiser step of the mini-batch ``rows`` (the ``index``-th of its epoch); its metrics, or None when the
    non-finite guard skipped it."""
    device = whole.batch.device
    norms = loss_norms(whole.mask[rows.to(device)])
    ctx.optimizer.zero_grad(set_to_none=True)
    pending, loss_sum = MetricSums(), torch.zeros((), device=device)
    lengths = whole.batch.attention_mask.sum(1).tolist()
    with ctx.parallel.accumulating():
        for idx in ctx.forward.micro_batches(ctx.parallel.share(rows), lengths):
            loss_sum = loss_sum + _micro_batch(ctx, whole, idx.to(device), norms, pending)
    ctx.parallel.reduce_gradients(lambda model: ctx.forward.probe(model, whole.batch))
    loss_sum = all_reduce(loss_sum)
    params = [p for p in ctx.model.parameters() if p.grad is not None]
    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # a DTensor under FSDP
    norm = full_tensor(grad_norm)
    if not whole.guard.admit(ctx.model, loss_sum, norm, index):
        ctx.optimizer.zero_grad(set_to_none=True)
        return None
    torch.nn.utils.clip_grads_with_norm_(params, ctx.cfg.trainer.max_grad_norm or float("inf"), grad_norm)
    ctx.optimizer.step()
    whole.guard.check_parameters(ctx.model, index)
    ctx.scheduler.step()
    pending.add("grad_norm", norm.detach(), 1)
    return pending


def _micro_batch(ctx: StepContext, whole: _Step, idx: torch.Tensor, norms: Norms, pending: MetricSums) -> torch.Tensor:
    """Forward and backward of the rows ``idx`` with the mini-batch's ``norms``; their metrics go to ``pending``.
    Returns the detached loss."""
    sub = whole.batch.rows(idx)
    # backward too: activation checkpointing recomputes the layers there, as the forward ran them
    with ctx.compiled.active() if ctx.compiled is not None else nullcontext():
        with ctx.forward.autocast(ctx.model):
            logprobs, entropy, ran = ctx.parallel.forward(ctx.forward.stats, sub, ctx.objective.entropy)  # FSDP returns a plain tuple
        loss = ctx.objective.loss(whole.tokens(idx, sub, logprobs, entropy), norms)
        loss.value.backward()
    pending.add("forward_token_share", ran, int(sub.attention_mask.sum()))
    _record(pending, loss, sub, ctx)
    return loss.value.detach().float()


def _record(metrics: MetricSums, loss: Loss, sub: RolloutBatch, ctx: StepContext) -> None:
    """The policy loss's metrics over the loss tokens, overall, by token source and by position; the KL's over its
    tokens; the rollout correction's."""
    token, mask, bins = loss.tokens, loss.mask, ctx.cfg.trainer.position_bins
    if loss.correction is not None:
        metrics.add_pairs("rollout_correction", loss.correction)
    if loss.kl is not None:
        metrics.add_tokens("kl_ref", *loss.kl)
    if loss.stale is not None:
        metrics.add_pairs(ctx.cfg.algo.stale_mask, loss.stale)
    for name in ("clip_low", "clip_high", "clipped", "kl_k3", "pg_loss"):
        metrics.add_tokens(name, token[name], mask)
    if ctx.objective.dual_clip:
        metrics.add_tokens("clip_dual", token["clip_dual"], mask)
    metrics.add_tokens("ratio", token["ratio"], mask)
    for name in sorted(token.keys() - set(METRICS)):  # the policy loss's own metrics (``masked``...), overall and by source
        metrics.add(name, token[name][mask].double().sum(), mask.sum())
        metrics.add_pairs(f"{name}_by_source", split_by_source(token[name], mask, sub.source))
    metrics.add_pairs("clipped_by_source", split_by_source(token["clipped"], mask, sub.source))
    metrics.add_pairs("ratio_by_source", split_by_source(token["ratio"], mask, sub.source))
    metrics.add_pairs("clipped_by_pos", absolute_bins(token["clipped"], mask, bins, response_mask=sub.resp_mask))
    metrics.add_pairs("clipped_by_rel", relative_deciles(token["clipped"], mask, response_mask=sub.resp_mask))
    if uses_seeds(ctx.cfg):
        metrics.add_pairs("clipped_by_source_pos", absolute_bins(token["clipped"], mask, bins, source=sub.source, response_mask=sub.resp_mask))
