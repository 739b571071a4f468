"""Pack samples into padded tensors and compute per-token log-probs and entropies.

Layout: each row is ``prompt + response`` right-padded to ``[B, L]``. Response-aligned tensors are
``[B, T]`` with ``T`` the longest response; ``resp_index[i, j]`` is the position whose logits
predict response token ``j`` of row ``i`` (``prompt_len_i - 1 + j``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from transformers import PreTrainedModel

from tsctl.models.logits import logits_head
from tsctl.trainer.samples import PREFIX, Sample
from tsctl.trainer.shared_prompts import can_share_prompts, prompt_groups, shared_prompt_hidden
from tsctl.trainer.token_stats import chunk_positions, head_token_stats

LOGITS_CHUNK_MIB = 512.0
"""Default size of one chunk of float32 logits (``trainer.logits_chunk_mib``)."""


@dataclass
class RolloutBatch:
    """Padded tensors of a step's samples.

    Attributes:
        input_ids: [B, L] prompt + response, right-padded.
        attention_mask: [B, L] 1 on real tokens.
        resp_index: [B, T] positions whose logits predict each response token.
        response_ids: [B, T] response token ids (pad where ``resp_mask`` is 0).
        resp_mask: [B, T] bool, real response tokens.
        source: [B, T] int8, PLAIN / PREFIX / SUFFIX per token.
        behaviour_logprobs: [B, T] pi_b log-probs on prefix tokens, 0 elsewhere.
        advantages: [B] one advantage per sample.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    resp_index: torch.Tensor
    response_ids: torch.Tensor
    resp_mask: torch.Tensor
    source: torch.Tensor
    behaviour_logprobs: torch.Tensor
    advantages: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def to(self, device: torch.device | str) -> "RolloutBatch":
        """This batch with every tensor on ``device``."""
        return RolloutBatch(**{k: getattr(self, k).to(device) for k in self.__dataclass_fields__})

    def rows(self, idx: torch.Tensor) -> "RolloutBatch":
        """The sub-batch of rows ``idx`` (trimmed to its own longest sequence and response)."""
        idx = idx.to(self.device)
        sub = RolloutBatch(**{k: getattr(self, k)[idx] for k in self.__dataclass_fields__})
        width = int(sub.attention_mask.sum(1).max())
        resp = int(sub.resp_mask.sum(1).max())
        sub.input_ids, sub.attention_mask = sub.input_ids[:, :width], sub.attention_mask[:, :width]
        for name in ("resp_index", "response_ids", "resp_mask", "source", "behaviour_logprobs"):
            setattr(sub, name, getattr(sub, name)[:, :resp])
        return sub


def pack(samples: Sequence[Sample], advantages: torch.Tensor, pad_id: int, device: torch.device | str = "cpu") -> RolloutBatch:
    """Pad ``samples`` into a :class:`RolloutBatch` on ``device``; ``advantages`` is [B] in sample order."""
    B = len(samples)
    L = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    T = max(1, max(len(s.response_ids) for s in samples))
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    resp_index = torch.zeros((B, T), dtype=torch.long)
    response_ids = torch.full((B, T), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((B, T), dtype=torch.bool)
    source = torch.zeros((B, T), dtype=torch.int8)
    behaviour = torch.zeros((B, T), dtype=torch.float32)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids)
        attention_mask[i, : p + r] = 1
        resp_index[i, :r] = torch.arange(p - 1, p - 1 + r)
        response_ids[i, :r] = torch.tensor(s.response_ids, dtype=torch.long)
        resp_mask[i, :r] = True
        source[i, :r] = torch.tensor(s.sources(), dtype=torch.int8)
        behaviour[i, : len(s.prefix_logprobs)] = torch.tensor(s.prefix_logprobs, dtype=torch.float32)
    return RolloutBatch(input_ids, attention_mask, resp_index, response_ids, resp_mask, source, behaviour, advantages.float()).to(device)


def response_logprobs(
    model: PreTrainedModel, batch: RolloutBatch, temperature: float = 1.0, with_entropy: bool = False,
    share_prompts: bool = True, logits_chunk_mib: float = LOGITS_CHUNK_MIB,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs [B, T] of the response tokens under ``model`` (and entropies [B, T] if asked).

    Logits are taken only at response positions. With ``share_prompts`` (and where
    :func:`~tsctl.trainer.shared_prompts.can_share_prompts` allows), rows with the same prompt share
    one forward of it (:mod:`tsctl.trainer.shared_prompts`); otherwise the padded rows run whole and
    the decoder's hidden states are gathered at response positions. The LM head, with the model's own
    logits post-processing (:mod:`tsctl.models.logits`), runs on chunks of about ``logits_chunk_mib``
    MiB of float32 logits (:mod:`tsctl.trainer.token_stats`). Logits are divided by ``temperature``
    so the log-probs are those of the sampling distribution. Runs in the caller's autocast context.
    """
    head = logits_head(model)
    positions = chunk_positions(logits_chunk_mib, head.projection.weight.shape[0])
    hidden = response_hidden(model, batch, share_prompts)
    return head_token_stats(head, hidden, batch.response_ids, temperature, with_entropy, positions)


def response_hidden(model: PreTrainedModel, batch: RolloutBatch, share_prompts: bool = True) -> torch.Tensor:
    """Final hidden states [B, T, d]; position ``j`` of row ``i`` predicts response token ``j``."""
    shared = prompt_sharing(model, batch, share_prompts)
    if shared is not None:
        return shared_prompt_hidden(model, *shared, batch.response_ids, batch.resp_mask)
    hidden = model.get_decoder()(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
    return torch.gather(hidden, 1, batch.resp_index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))


def prompt_sharing(
    model: PreTrainedModel, batch: RolloutBatch, share_prompts: bool = True
) -> tuple[list[tuple[int, ...]], torch.Tensor] | None:
    """The distinct prompts and each row's index among them [B] when the forward of ``batch`` shares
    prompts (asked for, and :func:`~tsctl.trainer.shared_prompts.can_share_prompts`); else None."""
    if not share_prompts or (model.training and _activation_checkpointing(model)):
        return None
    prompts, group = prompt_groups(batch.input_ids, batch.attention_mask.sum(1) - batch.resp_mask.sum(1))
    longest = int(batch.attention_mask.sum(1).max())
    return (prompts, group) if can_share_prompts(model, prompts, len(batch), longest) else None


def forward_tokens(model: PreTrainedModel, batch: RolloutBatch, share_prompts: bool = True) -> int:
    """Real tokens the policy forward of ``batch`` runs: every row whole, or each distinct prompt's
    context once plus every row's continuation (its last prompt token and its response)."""
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


def old_logprobs(policy_logprobs: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    """Per-token log-probs the importance ratio is taken against, [B, T].

    Prefix tokens use the stored pi_b log-probs; suffix and plain tokens use ``policy_logprobs``
    (pi_old, computed at the start of the update).
    """
    return torch.where(batch.source == PREFIX, batch.behaviour_logprobs, policy_logprobs)
