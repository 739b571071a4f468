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

The update reads the columns :meth:`tsctl.trainer.learner.Learner.score` wrote on the batch: the ratio
denominators, the engine's and the KL reference's log-probs and the loss mask. The loss mask is defined here,
next to its normalisers (:func:`loss_mask`): every response token, less the seed-prefix tokens when
``seeds.train_prefix`` is off, the rows cut at the length limit when ``algo.overlong=mask``, and the prefix
tokens of unknown pi_b when ``seeds.trace_logprobs=exclude``.

The loss of each micro-batch is the run's :class:`~tsctl.algo.objective.Objective` (built once from ``algo``): the
policy loss ``algo.policy_loss``, the rollout correction's weights, the KL and entropy terms, each aggregated by
``algo.aggregation`` with the mini-batch's normalisers. Its forward is the run's :class:`~tsctl.models.forward.Forward`
(packing, prompt sharing, the LM head's chunk, the micro-batch limits, autocast to ``model.compute_dtype``: bf16 on
CUDA by default while the parameters, their gradients and AdamW's state stay float32). Each mini-batch passes the
non-finite guard (:mod:`tsctl.trainer.nonfinite`) before and after its optimiser step. With ``trainer.compile``
the forwards run the policy's compiled decoder layers (:mod:`tsctl.models.compiled`). Logged per step: the policy
loss's metrics over the loss tokens, by source and position (its per-token ``ratio`` as ``importance_ratio`` and
``importance_ratio_by_source/<source>``, apart from the seeded share ``ratio``; an entry's own, such as ``masked``,
overall and as ``<name>_by_source/<source>``); ``kl_ref`` over the KL's tokens; with a rollout correction,
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
from typing import Protocol

import torch

from tsctl.algo.aggregations import Norms, loss_norms
from tsctl.algo.losses import METRICS
from tsctl.algo.objective import Loss, Objective, Tokens
from tsctl.algo.position_metrics import MetricSums, absolute_bins, relative_deciles, split_by_source
from tsctl.config.knobs import uses_seeds
from tsctl.config.rng import Stream, step_seed
from tsctl.config.schema import TsctlConfig
from tsctl.distributed.fsdp import full_tensor
from tsctl.distributed.world import all_reduce
from tsctl.models.batch import RolloutBatch
from tsctl.models.compiled import CompiledLayers
from tsctl.models.forward import Forward
from tsctl.models.samples import PREFIX
from tsctl.trainer.denominators import unknown_pi_b
from tsctl.trainer.nonfinite import NonFiniteGuard
from tsctl.trainer.parallel import Parallel


class Trainee(Protocol):
    """What the update reads and steps of the run's policy side (:class:`tsctl.trainer.learner.Learner`)."""

    cfg: TsctlConfig
    model: torch.nn.Module
    parallel: Parallel
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    guard: NonFiniteGuard
    forward: Forward
    objective: Objective
    compiled: CompiledLayers | None


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


def policy_update(learner: Trainee, batch: RolloutBatch, step: int) -> MetricSums:
    """Run ``trainer.epochs x trainer.mini_batches`` optimiser steps of ``learner`` on ``batch``; return the update's metrics.

    Args:
        learner: the run's policy side: its model, optimiser and schedule, :class:`~tsctl.algo.objective.Objective`,
            :class:`~tsctl.models.forward.Forward`, guard and ranks.
        batch: the step's samples, B rows, scored (:meth:`tsctl.trainer.learner.Learner.score`): its ratio
            denominators, loss mask, and, where the objective reads them, the engine's log-probs (the rollout
            correction weighs pi_old against them) and the frozen reference's (``algo.kl_coef > 0``), each [B, T].
        step: the step (from 0): the rows are shuffled by its stream, and the policy loss draws from another (both
            part of the resumable RNG state).
    """
    tr = learner.cfg.trainer
    draws = torch.Generator().manual_seed(step_seed(learner.cfg.seed, step, Stream.POLICY_LOSS))
    shuffle = torch.Generator().manual_seed(step_seed(learner.cfg.seed, step, Stream.SHUFFLE))
    metrics = MetricSums()
    learner.model.train()
    for _ in range(tr.epochs):
        order = torch.randperm(len(batch), generator=shuffle)
        for m, rows in enumerate(torch.tensor_split(order, min(tr.mini_batches, len(batch)))):
            taken = _mini_batch(learner, batch, rows, m + 1, draws)
            if taken is not None:
                metrics.merge(taken)
    learner.optimizer.zero_grad(set_to_none=True)  # no gradient memory held while the engine generates
    if tr.nonfinite == "skip":
        metrics.add("nonfinite_skips", learner.guard.skipped_this_step, 1)
    learner.model.eval()
    # Over the ranks: token sums add up; grad_norm and nonfinite_skips, the same on every rank, keep their means.
    return metrics.all_reduce()


def _mini_batch(learner: Trainee, batch: RolloutBatch, rows: torch.Tensor, index: int, draws: torch.Generator) -> MetricSums | None:
    """The optimiser step of the mini-batch ``rows`` (the ``index``-th of its epoch; ``draws``: the policy loss's
    random stream); its metrics, or None when the non-finite guard skipped it."""
    device, model, optimizer, forward = batch.device, learner.model, learner.optimizer, learner.forward
    norms = loss_norms(batch.loss_mask[rows.to(device)])
    optimizer.zero_grad(set_to_none=True)
    pending, loss_sum = MetricSums(), torch.zeros((), device=device)
    lengths = batch.attention_mask.sum(1).tolist()
    with learner.parallel.accumulating():
        for idx in forward.micro_batches(learner.parallel.share(rows), lengths):
            loss_sum = loss_sum + _micro_batch(learner, batch.rows(idx.to(device)), norms, draws, pending)
    learner.parallel.reduce_gradients(lambda model: forward.probe(model, batch))
    loss_sum = all_reduce(loss_sum)
    params = [p for p in model.parameters() if p.grad is not None]
    grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # a DTensor under FSDP
    norm = full_tensor(grad_norm)
    if not learner.guard.admit(model, loss_sum, norm, index):
        optimizer.zero_grad(set_to_none=True)
        return None
    torch.nn.utils.clip_grads_with_norm_(params, learner.cfg.trainer.max_grad_norm or float("inf"), grad_norm)
    optimizer.step()
    learner.guard.check_parameters(model, index)
    learner.scheduler.step()
    pending.add("grad_norm", norm.detach(), 1)
    return pending


def _micro_batch(learner: Trainee, sub: RolloutBatch, norms: Norms, draws: torch.Generator, pending: MetricSums) -> torch.Tensor:
    """Forward and backward of the micro-batch ``sub`` with the mini-batch's ``norms``; its metrics go to ``pending``.
    Returns the detached loss."""
    objective, forward = learner.objective, learner.forward
    # backward too: activation checkpointing recomputes the layers there, as the forward ran them
    with learner.compiled.active() if learner.compiled is not None else nullcontext():
        with forward.autocast(learner.model):
            logprobs, entropy, ran = learner.parallel.forward(forward.stats, sub, objective.entropy)  # FSDP returns a plain tuple
        loss = objective.loss(_tokens(objective, sub, logprobs, entropy, draws), norms)
        loss.value.backward()
    pending.add("forward_token_share", ran, int(sub.attention_mask.sum()))
    _record(pending, loss, sub, learner)
    return loss.value.detach().float()


def _tokens(objective: Objective, sub: RolloutBatch, logprobs: torch.Tensor, entropy: torch.Tensor | None, draws: torch.Generator) -> Tokens:
    """The objective's inputs of the micro-batch ``sub`` with its forward's log-probs and entropies [b, t]: the
    columns it reads (the engine's log-probs only to correct for the engine; LUFFY's trace tokens only to shape them)."""
    engine = sub.engine_logprobs if objective.corrects else None
    shaped = unknown_pi_b(sub) if objective.shaping_gamma is not None else None
    return Tokens(logprobs, sub.denominators, sub.advantages, sub.loss_mask, sub.source == PREFIX, entropy, sub.ref_logprobs, engine, draws, shaped)


def _record(metrics: MetricSums, loss: Loss, sub: RolloutBatch, learner: Trainee) -> None:
    """The policy loss's metrics over the loss tokens, overall, by token source and by position; the KL's over its
    tokens; the rollout correction's."""
    cfg = learner.cfg
    token, mask, bins = loss.tokens, loss.mask, cfg.trainer.position_bins
    if loss.correction is not None:
        metrics.add_pairs("rollout_correction", loss.correction)
    if loss.kl is not None:
        metrics.add_tokens("kl_ref", *loss.kl)
    if loss.stale is not None:
        metrics.add_pairs(cfg.algo.stale_mask, loss.stale)
    for name in ("clip_low", "clip_high", "clipped", "kl_k3", "pg_loss"):
        metrics.add_tokens(name, token[name], mask)
    if learner.objective.dual_clip:
        metrics.add_tokens("clip_dual", token["clip_dual"], mask)
    metrics.add_tokens("importance_ratio", token["ratio"], mask)
    for name in sorted(token.keys() - set(METRICS)):  # the policy loss's own metrics (``masked``...), overall and by source
        metrics.add(name, token[name][mask].double().sum(), mask.sum())
        metrics.add_pairs(f"{name}_by_source", split_by_source(token[name], mask, sub.source))
    metrics.add_pairs("clipped_by_source", split_by_source(token["clipped"], mask, sub.source))
    metrics.add_pairs("importance_ratio_by_source", split_by_source(token["ratio"], mask, sub.source))
    metrics.add_pairs("clipped_by_pos", absolute_bins(token["clipped"], mask, bins, response_mask=sub.resp_mask))
    metrics.add_pairs("clipped_by_rel", relative_deciles(token["clipped"], mask, response_mask=sub.resp_mask))
    if uses_seeds(cfg):
        metrics.add_pairs("clipped_by_source_pos", absolute_bins(token["clipped"], mask, bins, source=sub.source, response_mask=sub.resp_mask))
