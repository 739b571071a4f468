"""The frozen KL reference model (``algo.kl_coef > 0``): where it lives and how its log-probs are computed.

With ``model.lora`` it is the policy itself with its adapter switched off (the base model: no second copy, no
place to choose). Otherwise it is a second full copy of the initial model, and ``algo.ref_placement`` chooses its place:

- ``policy``: on the policy's device, like the policy (fastest; a second copy in GPU memory);
- ``cpu``: kept and run on the CPU (no GPU memory; its one forward per step runs on the CPU);
- ``offload``: kept on the CPU and moved to the policy's device for its forward, then back (GPU
  memory only during that forward; a host-to-device copy of the weights per step).

Its log-probs always come back on the policy's device, where the update uses them.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import RolloutBatch
from tsctl.models.forward import Forward
from tsctl.io.adapters import has_adapter
from tsctl.models.loading import load_model
from tsctl.models.lora import adapter_off
from tsctl.models.precision import model_device


def load_reference(cfg: TsctlConfig, path: str, policy: PreTrainedModel) -> PreTrainedModel | None:
    """The reference model from ``path`` (eval mode, no grad) per ``algo.ref_placement``, or ``policy`` when it carries
    an adapter (its log-probs are then taken with the adapter off); None when ``kl_coef`` is 0."""
    if cfg.algo.kl_coef <= 0:
        return None
    if has_adapter(policy):
        return policy
    device = "cpu" if cfg.algo.ref_placement in ("cpu", "offload") else cfg.model.device
    model = load_model(path, cfg.model.dtype, device)[0].eval()
    model.requires_grad_(False)
    return model


def reference_logprobs(ref: PreTrainedModel, batch: RolloutBatch, forward: Forward, placement: str) -> torch.Tensor:
    """No-grad log-probs [B, T] of ``batch`` under ``ref`` with the run's ``forward``, on the batch's device
    (``placement``: ``algo.ref_placement``); a policy carrying an adapter runs with it off (the base model)."""
    if has_adapter(ref):
        with adapter_off(ref):
            return forward.recompute(ref, batch, entropy=False)[0]
    if placement == "offload" and model_device(ref) != batch.device:
        ref.to(batch.device)
        try:
            return forward.recompute(ref, batch, entropy=False)[0]
        finally:
            ref.to("cpu")
    return forward.recompute(ref, batch.to(model_device(ref)), entropy=False)[0].to(batch.device)
