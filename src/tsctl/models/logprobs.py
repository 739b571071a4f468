"""The response log-prob forward: log-probs (and entropies) of each response token under a model.

Used with grad by the update (:mod:`tsctl.trainer.update`) and without by everything that needs a
policy's log-probs of given tokens: pi_old when it is recomputed, pi_b of new seeds, the KL
reference (all through :class:`tsctl.models.forward.Forward`), the entropy of ``tsctl eval``. Logits are taken only at response positions; the rows may
run packed, without padding (:mod:`tsctl.models.packing`), and rows that share a prompt may share
one forward of it (:mod:`tsctl.models.shared_prompts`, or a shared packed segment); the LM head runs
on chunks of positions (:mod:`tsctl.models.token_stats`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from transformers import PreTrainedModel

from tsctl.models.batch import RolloutBatch
from tsctl.models.logits import logits_head
from tsctl.models.packing import pack_rows, packed_hidden, packing_kind
from tsctl.models.shared_prompts import can_share_prompts, prompt_groups, shared_prompt_hidden
from tsctl.models.token_stats import chunk_positions, head_token_stats

LOGITS_CHUNK_MIB = 512.0
"""Default size of one chunk of float32 logits (``trainer.logits_chunk_mib``)."""


class TokenStats(NamedTuple):
    """What one response forward gives: log-probs ``[B, T]``, entropies ``[B, T]`` (None unless asked) and the real
    tokens the forward ran (every row whole, or each shared prompt once, or the packed segments)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    tokens: int


def token_stats(
    model: PreTrainedModel, batch: RolloutBatch, temperature: float = 1.0, with_entropy: bool = False,
    share_prompts: bool = True, logits_chunk_mib: float = LOGITS_CHUNK_MIB, padding_free: bool = False,
) -> TokenStats:
    """Log-probs [B, T] of the response tokens under ``model`` (and entropies [B, T] if asked), with the tokens run.

    Logits are taken only at response positions. With ``padding_free`` (and where
    :func:`~tsctl.models.packing.packing_kind` allows) the rows run packed without padding, the LM
    head only at real response tokens, and pad positions hold 0. Otherwise, with ``share_prompts``
    (and where :func:`~tsctl.models.shared_prompts.can_share_prompts` allows), rows with the same
    prompt share one forward of it (:mod:`tsctl.models.shared_prompts`); else the padded rows run
    whole and the decoder's hidden states are gathered at response positions. The LM head, with the
    model's own logits post-processing (:mod:`tsctl.models.logits`), runs on chunks of about
    ``logits_chunk_mib`` MiB of float32 logits (:mod:`tsctl.models.token_stats`). Logits are divided
    by ``temperature`` so the log-probs are those of the sampling distribution. Runs in the caller's
    autocast context; the way the rows run is decided once, and the token count comes from it.
    """
    head = logits_head(model)
    positions = chunk_positions(logits_chunk_mib, head.projection.weight.shape[0])
    kind = _packing_kind(model, batch, padding_free)
    if kind is None:
        shared = prompt_sharing(model, batch, share_prompts)
        hidden = _padded_hidden(model, batch, shared)
        logprobs, entropy = head_token_stats(head, hidden, batch.response_ids, temperature, with_entropy, positions)
        tokens = int(batch.attention_mask.sum()) if shared is None else sum(len(p) - 1 for p in shared[0]) + int(batch.resp_mask.sum())
        return TokenStats(logprobs, entropy, tokens)
    packed = pack_rows(batch, share=share_prompts and kind != "varlen", kind=kind)
    hidden = packed_hidden(model, packed, kind)  # [N, d]
    targets = batch.response_ids[batch.resp_mask]  # [N]
    logprobs, entropy = head_token_stats(head, hidden[None], targets[None], temperature, with_entropy, positions)
    return TokenStats(_unpack(logprobs[0], batch.resp_mask), _unpack(entropy[0], batch.resp_mask) if with_entropy else None, packed.tokens)


def response_logprobs(
    model: PreTrainedModel, batch: RolloutBatch, temperature: float = 1.0, with_entropy: bool = False,
    share_prompts: bool = True, logits_chunk_mib: float = LOGITS_CHUNK_MIB, padding_free: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, T] of the response tokens under ``model`` and entropies [B, T] (None unless asked): :func:`token_stats`."""
    return token_stats(model, batch, temperature, with_entropy, share_prompts, logits_chunk_mib, padding_free)[:2]


def _packing_kind(model: PreTrainedModel, batch: RolloutBatch, padding_free: bool) -> str | None:
    """The kind of packed forward ``batch`` runs (:func:`~tsctl.models.packing.packing_kind`), None when it runs padded
    (not asked for, the model's attention does not allow it, or no response token to predict)."""
    checkpointing = model.training and _activation_checkpointing(model)
    kind = packing_kind(model, int(batch.attention_mask.sum(1).max()), checkpointing) if padding_free else None
    return kind if kind is not None and bool(batch.resp_mask.any()) else None


def _unpack(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token values [N] of the real response tokens laid out as [B, T] (0 at pad positions)."""
    return torch.zeros(mask.shape, dtype=values.dtype, device=values.device).masked_scatter(mask, values)


def _padded_hidden(model: PreTrainedModel, batch: RolloutBatch, shared: tuple[list[tuple[int, ...]], torch.Tensor] | None) -> torch.Tensor:
    """Final hidden states [B, T, d] of the padded forward (``shared``: the distinct prompts and each row's, when the rows
    share them); position ``j`` of row ``i`` predicts response token ``j``."""
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
