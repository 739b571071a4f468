"""Collate samples into padded tensors: the batch every forward of a step reads.

Layout: each row is ``prompt + response`` right-padded to ``[B, L]``. Response-aligned tensors are
``[B, T]`` with ``T`` the longest response; ``resp_index[i, j]`` is the position whose logits
predict response token ``j`` of row ``i`` (``prompt_len_i - 1 + j``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from tsctl.models.samples import PREFIX, Sample


@dataclass
class RolloutBatch:
    """Padded tensors of a step's samples, and the columns the trainer scores them with.

    Attributes:
        input_ids: [B, L] prompt + response, right-padded.
        attention_mask: [B, L] 1 on real tokens.
        resp_index: [B, T] positions whose logits predict each response token.
        response_ids: [B, T] response token ids (pad where ``resp_mask`` is 0).
        resp_mask: [B, T] bool, real response tokens.
        source: [B, T] int8, PLAIN / PREFIX / SUFFIX per token.
        behaviour_logprobs: [B, T] pi_b log-probs on prefix tokens, 0 elsewhere.
        advantages: [B] one advantage per sample.
        finished: [B] bool, the response ended with an end token (False: cut at the length limit).
        engine_logprobs: [B, T] the engine's log-probs of the tokens it generated, 0 on prefix tokens and padding.
        engine_entropy: [B, T] the engine's entropy at every response token (prefix, then continuation), 0 on
            padding; None when some sample carries none.

    Written by :meth:`tsctl.trainer.learner.Learner.score` (None before):

    Attributes:
        old_logprobs: [B, T] pi_old's log-probs of the response tokens (0 on prefix tokens when from the engine).
        old_entropy: [B, T] pi_old's entropy at every response token.
        denominators: [B, T] what each importance ratio is taken against (:mod:`tsctl.trainer.denominators`).
        ref_logprobs: [B, T] the frozen KL reference's log-probs (``algo.kl_coef > 0``), else None.
        loss_mask: [B, T] bool, the tokens that enter the loss and its token normaliser.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    resp_index: torch.Tensor
    response_ids: torch.Tensor
    resp_mask: torch.Tensor
    source: torch.Tensor
    behaviour_logprobs: torch.Tensor
    advantages: torch.Tensor
    finished: torch.Tensor
    engine_logprobs: torch.Tensor | None = None
    engine_entropy: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    old_entropy: torch.Tensor | None = None
    denominators: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def to(self, device: torch.device | str) -> "RolloutBatch":
        """This batch with every tensor on ``device``."""
        return RolloutBatch(**{k: _apply(getattr(self, k), lambda t: t.to(device)) for k in self.__dataclass_fields__})

    def rows(self, idx: torch.Tensor) -> "RolloutBatch":
        """The sub-batch of rows ``idx`` (trimmed to its own longest sequence and response)."""
        idx = idx.to(self.device)
        sub = RolloutBatch(**{k: _apply(getattr(self, k), lambda t: t[idx]) for k in self.__dataclass_fields__})
        width = int(sub.attention_mask.sum(1).max())
        resp = int(sub.resp_mask.sum(1).max())
        sub.input_ids, sub.attention_mask = sub.input_ids[:, :width], sub.attention_mask[:, :width]
        for name in RESPONSE_COLUMNS:
            setattr(sub, name, _apply(getattr(sub, name), lambda t: t[:, :resp]))
        return sub


RESPONSE_COLUMNS = (
    "resp_index", "response_ids", "resp_mask", "source", "behaviour_logprobs", "engine_logprobs", "engine_entropy",
    "old_logprobs", "old_entropy", "denominators", "ref_logprobs", "loss_mask",
)
"""The [B, T] columns of a :class:`RolloutBatch`: one per response token."""


def _apply(tensor: torch.Tensor | None, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor | None:
    """``fn(tensor)``, or None for a column not written."""
    return None if tensor is None else fn(tensor)


def collate(samples: Sequence[Sample], advantages: torch.Tensor, pad_id: int, device: torch.device | str = "cpu") -> RolloutBatch:
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
    finished = torch.tensor([s.finished for s in samples], dtype=torch.bool)
    engine = torch.zeros((B, T), dtype=torch.float32)
    entropy = torch.zeros((B, T), dtype=torch.float32) if all(len(s.entropies) == len(s.response_ids) for s in samples) else None
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids)
        attention_mask[i, : p + r] = 1
        resp_index[i, :r] = torch.arange(p - 1, p - 1 + r)
        response_ids[i, :r] = torch.tensor(s.response_ids, dtype=torch.long)
        resp_mask[i, :r] = True
        source[i, :r] = torch.tensor(s.sources(), dtype=torch.int8)
        behaviour[i, : len(s.prefix_logprobs)] = torch.tensor(s.prefix_logprobs, dtype=torch.float32)
        start = len(s.prefix_ids)
        engine[i, start : start + len(s.generated_logprobs)] = torch.tensor(s.generated_logprobs, dtype=torch.float32)
        if entropy is not None:
            entropy[i, : len(s.entropies)] = torch.tensor(s.entropies, dtype=torch.float32)
    return RolloutBatch(
        input_ids, attention_mask, resp_index, response_ids, resp_mask, source, behaviour, advantages.float(), finished, engine, entropy,
    ).to(device)


def pi_b_on_prefix(policy_logprobs: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    """``policy_logprobs`` [B, T] (pi_old's) with the stored pi_b log-probs on the seed-prefix tokens: what each ratio is
    taken against, before the prefix tokens of unknown pi_b are resolved (:mod:`tsctl.trainer.denominators`)."""
    return torch.where(batch.source == PREFIX, batch.behaviour_logprobs, policy_logprobs)
