"""The response log-prob forward: log-probs (and entropies) of each response token under a model.

Used with grad by the update (:mod:`tsctl.trainer.update`) and without by everything that needs a
policy's log-probs of given tokens: pi_old when it is recomputed, pi_b of new seeds, the KL
reference, the entropy of ``tsctl eval``. Logits are taken only at response positions; the rows may
run packed, without padding (:mod:`tsctl.models.packing`), and rows that share a prompt may share
one forward of it (:mod:`tsctl.models.shared_prompts`, or a shared packed segment); the LM head runs
on chunks of positions (:mod:`tsctl.models.token_stats`).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import RolloutBatch
from tsctl.models.logits import logits_head
from tsctl.models.micro_batches import micro_batches
from tsctl.models.packing import PackedBatch, pack_rows, packed_hidden, packed_tokens, packing_kind
from tsctl.models.precision import autocast, compute_dtype, model_device
from tsctl.models.shared_prompts import can_share_prompts, prompt_groups, shared_prompt_hidden
from tsctl.models.token_stats import chunk_positions, head_token_stats

LOGITS_CHUNK_MIB = 512.0
"""Default size of one chunk of float32 logits (``trainer.logits_chunk_mib``)."""


def response_logprobs(
    model: PreTrainedModel, batch: RolloutBatch, temperature: float = 1.0, with_entropy: bool = False,
    share_prompts: bool = True, logits_chunk_mib: float = LOGITS_CHUNK_MIB, pack: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, T] of the response tokens under ``model`` (and entropies [B, T] if asked).

    Logits are taken only at response positions. With ``pack`` (and where
    :func:`~tsctl.models.packing.packing_kind` allows) the rows run packed without padding, the LM
    head only at real response tokens, and pad positions hold 0. Otherwise, with ``share_prompts``
    (and where :func:`~tsctl.models.shared_prompts.can_share_prompts` allows), rows with the same
    prompt share one forward of it (:mod:`tsctl.models.shared_prompts`); else the padded rows run
    whole and the decoder's hidden states are gathered at response positions. The LM head, with the
    model's own logits post-processing (:mod:`tsctl.models.logits`), runs on chunks of about
    ``logits_chunk_mib`` MiB of float32 logits (:mod:`tsctl.models.token_stats`). Logits are divided
    by ``temperature`` so the log-probs are those of the sampling distribution. Runs in the caller's
    autocast context.
    """
    head = logits_head(model)
    positions = chunk_positions(logits_chunk_mib, head.projection.weight.shape[0])
    packed = packing(model, batch, pack, share_prompts)
    if packed is None:
        hidden = response_hidden(model, batch, share_prompts)
        return head_token_stats(head, hidden, batch.response_ids, temperature, with_entropy, positions)
    hidden = packed_hidden(model, *packed)  # [N, d]
    targets = batch.response_ids[batch.resp_mask]  # [N]
    logprobs, entropy = head_token_stats(head, hidden[None], targets[None], temperature, with_entropy, positions)
    return _unpack(logprobs[0], batch.resp_mask), (_unpack(entropy[0], batch.resp_mask) if with_entropy else None)


def packing(model: PreTrainedModel, batch: RolloutBatch, pack: bool, share_prompts: bool) -> tuple[PackedBatch, str] | None:
    """The packed rows of ``batch`` and the kind of forward they run (:func:`~tsctl.models.packing.packing_kind`),
    when its forward packs (asked for, the model's attention allows, a response token to predict); else None.
    Rows share prompts in packed segments when ``share_prompts``, except on FlashAttention's varlen path."""
    kind = _packing_kind(model, batch, pack)
    return (pack_rows(batch, share=share_prompts and kind != "varlen", kind=kind), kind) if kind is not None else None


def _packing_kind(model: PreTrainedModel, batch: RolloutBatch, pack: bool) -> str | None:
    """The kind of packed forward ``batch`` runs (:func:`~tsctl.models.packing.packing_kind`), None when it runs padded."""
    checkpointing = model.training and _activation_checkpointing(model)
    kind = packing_kind(model, int(batch.attention_mask.sum(1).max()), checkpointing) if pack else None
    return kind if kind is not None and bool(batch.resp_mask.any()) else None


def _unpack(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token values [N] of the real response tokens laid out as [B, T] (0 at pad positions)."""
    return torch.zeros(mask.shape, dtype=values.dtype, device=values.device).masked_scatter(mask, values)


def response_hidden(model: PreTrainedModel, batch: RolloutBatch, share_prompts: bool = True) -> torch.Tensor:
    """Final hidden states [B, T, d] of the padded forward; position ``j`` of row ``i`` predicts response token ``j``."""
    shared = prompt_sharing(model, batch, share_prompts)
    if shared is not None:
        return shared_prompt_hidden(model, *shared, batch.response_ids, batch.resp_mask)
    hidden = model.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    return torch.gather(hidden, 1, batch.resp_index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))


def prompt_sharing(
    model: PreTrainedModel, batch: RolloutBatch, share_prompts: bool = True
) -> tuple[list[tuple[int, ...]], torch.Tensor] | None:
    """The distinct prompts and each row's index among them [B] when the forward of ``batch`` shares
    prompts (asked for, and :func:`~tsctl.models.shared_prompts.can_share_prompts`); else None."""
    if not share_prompts or (model.training and _activation_checkpointing(model)):
        return None
    prompts, group = prompt_groups(batch.input_ids, batch.attention_mask.sum(1) - batch.resp_mask.sum(1))
    longest = int(batch.attention_mask.sum(1).max())
    return (prompts, group) if can_share_prompts(model, prompts, len(batch), longest) else None


def forward_tokens(model: PreTrainedModel, batch: RolloutBatch, share_prompts: bool = True, pack: bool = False) -> int:
    """Real tokens the policy forward of ``batch`` runs: every row whole, or each distinct prompt's
    context once plus every row's continuation (its last prompt token and its response); packed, the
    tokens of its segments (:attr:`~tsctl.models.packing.PackedBatch.tokens`)."""
    kind = _packing_kind(model, batch, pack)
    if kind is not None:  # counted from the segments, without packing the rows again
        return packed_tokens(batch, share=share_prompts and kind != "varlen", kind=kind)
    shared = prompt_sharing(model, batch, share_prompts)
    if shared is None:
        return int(batch.attention_mask.sum())
    return sum(len(p) - 1 for p in shared[0]) + int(batch.resp_mask.sum())


def enable_activation_checkpointing(model: PreTrainedModel) -> None:
    """Turn on HF activation (gradient) checkpointing of every decoder layer, non-reentrant."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x; the old name warns there
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _activation_checkpointing(model: PreTrainedModel) -> bool:
    """Whether the model recomputes activations in backward, which turns its cache off in training: the
    shared-prompt forward needs the cache, so training forwards then run whole rows (same results)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(model.is_gradient_checkpointing if flag is None else flag)


def recompute(
    model: PreTrainedModel, batch: RolloutBatch, temperature: float, micro_batch_size: int = 0, entropy: bool = True,
    share_prompts: bool = True, micro_batch_tokens: int = 0, compute_dtype: torch.dtype | None = None,
    logits_chunk_mib: float = LOGITS_CHUNK_MIB, pack: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """No-grad log-probs [B, T] (and entropies [B, T] when asked) of ``model``, on the batch's device.

    Micro-batched as the update is (:func:`~tsctl.models.micro_batches.micro_batches`: at most
    ``micro_batch_size`` rows, ``micro_batch_tokens`` padded tokens; 0 = no limit), computed under
    autocast to ``compute_dtype`` (None or float32: none). ``share_prompts``, ``logits_chunk_mib`` and
    ``pack`` (the token budget then counts real tokens): as in :func:`response_logprobs`.
    """
    T = batch.resp_mask.shape[1]
    logps = torch.zeros(batch.resp_mask.shape, dtype=torch.float32, device=batch.device)
    ents = torch.zeros(batch.resp_mask.shape, dtype=torch.float32, device=batch.device) if entropy else None
    lengths = batch.attention_mask.sum(1).tolist()
    with torch.no_grad(), autocast(model_device(model), compute_dtype):
        for idx in micro_batches(torch.arange(len(batch)), lengths, micro_batch_size, micro_batch_tokens, packed=pack):
            idx = idx.to(batch.device)
            sub = batch.rows(idx)
            lp, ent = response_logprobs(
                model, sub, temperature, with_entropy=entropy, share_prompts=share_prompts, logits_chunk_mib=logits_chunk_mib, pack=pack,
            )
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
        compute_dtype=compute_dtype(cfg, model), logits_chunk_mib=tr.logits_chunk_mib, pack=tr.pack,
    )
