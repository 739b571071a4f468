"""How the trainer runs a model over responses, built once per run: :class:`Forward`.

Every forward of the trainer's numerics (the update's, pi_old's recompute, the KL reference's, the probe that ends
a mini-batch under FSDP, the teacher-forced pi_b of new seeds) reads the same settings: the sampling temperature the
log-probs are taken at, padding-free packing (``trainer.pack``), prompt sharing (``trainer.share_prompts``), the LM
head's chunk (``trainer.logits_chunk_mib``), the micro-batch limits (``trainer.micro_batch_size``,
``trainer.micro_batch_tokens``) and the compute dtype (``model.compute_dtype``, resolved for each model's device).
They travel together in one :class:`Forward` rather than as loose arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ContextManager, Sequence

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import RolloutBatch
from tsctl.models.logprobs import LOGITS_CHUNK_MIB, TokenStats, token_stats
from tsctl.models.micro_batches import micro_batches
from tsctl.models.precision import autocast, model_device, resolve_compute_dtype


@dataclass(frozen=True)
class Forward:
    """The trainer's forward settings.

    Attributes:
        temperature: the log-probs are those of the sampling distribution at this temperature (``engine.temperature``,
            0 read as 1).
        share_prompts: rows of one prompt share its forward (:mod:`tsctl.models.shared_prompts`).
        padding_free: rows run packed without padding (``trainer.pack``; :mod:`tsctl.models.packing`).
        logits_chunk_mib: MiB of float32 logits per chunk of the LM head.
        micro_batch_size: most rows per forward (0: no limit).
        micro_batch_tokens: most tokens per forward, padded or (``padding_free``) real (0: no limit).
        compute_dtype: ``model.compute_dtype`` (``auto``, ``float32``, ``bfloat16``), resolved per model's device.
    """

    temperature: float = 1.0
    share_prompts: bool = True
    padding_free: bool = False
    logits_chunk_mib: float = LOGITS_CHUNK_MIB
    micro_batch_size: int = 0
    micro_batch_tokens: int = 0
    compute_dtype: str = "float32"

    @classmethod
    def of(cls, cfg: TsctlConfig) -> Forward:
        """The forward of the run ``cfg``."""
        tr = cfg.trainer
        return cls(cfg.engine.temperature or 1.0, tr.share_prompts, tr.pack, tr.logits_chunk_mib, tr.micro_batch_size, tr.micro_batch_tokens,
                   cfg.model.compute_dtype)

    def dtype(self, model: torch.nn.Module) -> torch.dtype:
        """The compute dtype on ``model``'s device."""
        return resolve_compute_dtype(self.compute_dtype, model_device(model))

    def autocast(self, model: torch.nn.Module) -> ContextManager:
        """Autocast to the compute dtype on ``model``'s device (nothing for float32)."""
        return autocast(model_device(model), self.dtype(model))

    def micro_batches(self, rows: torch.Tensor, lengths: Sequence[int], max_rows: int | None = None) -> list[torch.Tensor]:
        """``rows`` split within the micro-batch limits (:func:`~tsctl.models.micro_batches.micro_batches`; ``lengths``:
        every row's tokens; ``max_rows`` in place of ``micro_batch_size``)."""
        size = self.micro_batch_size if max_rows is None else max_rows
        return micro_batches(rows, lengths, size, self.micro_batch_tokens, packed=self.padding_free)

    def stats(self, model: PreTrainedModel, batch: RolloutBatch, with_entropy: bool = False) -> TokenStats:
        """Log-probs [B, T] (entropies [B, T] when asked) of one micro-batch and the tokens run, in the caller's grad mode
        and autocast (:func:`~tsctl.models.logprobs.token_stats`)."""
        return token_stats(model, batch, self.temperature, with_entropy, self.share_prompts, self.logits_chunk_mib, self.padding_free)

    def recompute(
        self, model: PreTrainedModel, batch: RolloutBatch, entropy: bool = True, max_rows: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """No-grad log-probs [B, T] (and entropies [B, T] when asked) of ``model``, on the batch's device: micro-batched
        as the update is, under autocast to the compute dtype (``max_rows`` in place of ``micro_batch_size``)."""
        T = batch.resp_mask.shape[1]
        logps = torch.zeros(batch.resp_mask.shape, dtype=torch.float32, device=batch.device)
        ents = torch.zeros(batch.resp_mask.shape, dtype=torch.float32, device=batch.device) if entropy else None
        lengths = batch.attention_mask.sum(1).tolist()
        with torch.no_grad(), self.autocast(model):
            for idx in self.micro_batches(torch.arange(len(batch)), lengths, max_rows):
                idx = idx.to(batch.device)
                lp, ent, _ = self.stats(model, batch.rows(idx), entropy)
                logps[idx] = torch.nn.functional.pad(lp, (0, T - lp.shape[1]))
                if entropy:
                    ents[idx] = torch.nn.functional.pad(ent, (0, T - ent.shape[1]))
        return logps, ents

    def probe(self, model: torch.nn.Module, batch: RolloutBatch) -> torch.Tensor:
        """The summed log-probs of ``batch``'s first row, padded and whole (the same input and work on every rank): the
        forward that ends a mini-batch under FSDP (:func:`tsctl.distributed.fsdp.reduce_gradients`)."""
        with self.autocast(model):
            first = batch.rows(torch.zeros(1, dtype=torch.long))
            return token_stats(model, first, self.temperature, share_prompts=False, logits_chunk_mib=self.logits_chunk_mib).logprobs.sum()
