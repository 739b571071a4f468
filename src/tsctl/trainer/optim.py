"""The policy the trainer steps and its optimiser: fp32 parameters, AdamW, the learning-rate schedule.

The schedule is ours, not ``transformers.get_scheduler``'s: its warm-up gives optimiser step ``k``
the factor ``(k + 1) / warmup_steps`` (the first step already learns), where transformers' gives
``k / warmup_steps`` (a first step at learning rate 0), and its cosine groups the float operations
differently; either would change every run's numbers.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tsctl.config.schema import TsctlConfig
from tsctl.io.adapters import adapter_base, is_adapter_folder
from tsctl.models.loading import load_model
from tsctl.models.logits import logits_head
from tsctl.models.logprobs import enable_activation_checkpointing
from tsctl.models.lora import add_adapter, base_reference, load_adapter_weights, lora_on, trainable_parameters
from tsctl.models.precision import require_fp32_master


def load_trainable(cfg: TsctlConfig, path: str, base: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The policy to train from ``path`` (the base model ``base``, or a checkpoint to resume): fp32 parameters on
    ``model.device``, its LM head checked (:func:`~tsctl.models.logits.logits_head`), activation checkpointing on
    when configured.

    With ``model.lora`` the policy is the base model with an adapter (:mod:`tsctl.models.lora`): a new one drawn from
    the run's seed, or, from a checkpoint's adapter folder, the adapter it saved over the base it names.
    """
    require_fp32_master(cfg.model.dtype)
    resumed_adapter = lora_on(cfg.model.lora) and is_adapter_folder(path)
    model, tokenizer = load_model(adapter_base(path) if resumed_adapter else path, cfg.model.dtype, cfg.model.device)
    logits_head(model)  # refuses a model whose logits post-processing the trainer would not reproduce
    if lora_on(cfg.model.lora):
        add_adapter(model, cfg.model.lora, adapter_base(path) if resumed_adapter else base_reference(base), cfg.seed)
        if resumed_adapter:
            load_adapter_weights(model, path)
    if cfg.trainer.gradient_checkpointing:
        enable_activation_checkpointing(model)
    return model, tokenizer


def lr_lambda(cfg: TsctlConfig) -> Callable[[int], float]:
    """Multiplier of the peak LR per optimiser step: linear warm-up, then constant or cosine."""
    total = cfg.trainer.steps * cfg.trainer.mini_batches * cfg.trainer.epochs
    warm = cfg.trainer.warmup_steps

    def factor(opt_step: int) -> float:
        if opt_step < warm:
            return (opt_step + 1) / warm
        if cfg.trainer.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * (opt_step - warm) / max(1, total - warm)))
        return 1.0

    return factor


def make_optimizer(cfg: TsctlConfig, model: PreTrainedModel) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over the (float32) trainable parameters (an adapter's alone with ``model.lora``) and its learning-rate
    schedule (:func:`lr_lambda`)."""
    tr = cfg.trainer
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=tr.lr, weight_decay=tr.weight_decay, betas=(0.9, 0.999))
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
