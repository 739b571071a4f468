"""Parameter (master) dtype and compute dtype: fp32 weights that the optimiser steps, bf16 math on GPU.

``model.dtype`` is the dtype the parameters are stored and stepped in: float32 by default, on every
device. AdamW on bf16 parameters loses every update smaller than half a bf16 rounding step (about
``|w| / 256``): at a learning rate of 1e-6 most updates vanish and training silently does nothing, so
``tsctl train`` refuses ``model.dtype=bfloat16`` (:func:`require_fp32_master`).

``model.compute_dtype`` is the dtype the forwards compute in, through :func:`torch.autocast`:
``auto`` is bfloat16 on CUDA (what verl and TRL do: fp32 master weights, bf16 compute) and float32
elsewhere, where no autocast is entered at all (so CPU runs are bit-identical to plain fp32).
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch
from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_compute_dtype(name: str, device: torch.device | str) -> torch.dtype:
    """``model.compute_dtype`` on ``device``: ``auto`` is bfloat16 on CUDA, float32 elsewhere."""
    if name == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    return DTYPES[name]


def compute_dtype(cfg: TsctlConfig, model: torch.nn.Module) -> torch.dtype:
    """``cfg.model.compute_dtype`` resolved for ``model``'s device."""
    return resolve_compute_dtype(cfg.model.compute_dtype, model_device(model))


def autocast(device: torch.device | str, dtype: torch.dtype | None) -> ContextManager:
    """``torch.autocast`` to ``dtype`` on ``device``'s type, or a null context for float32 (or None).

    Matmuls and linear layers then run in ``dtype`` while parameters, their gradients and the
    optimiser state stay in their own (float32) dtype.
    """
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s parameters."""
    return next(model.parameters()).device


def require_fp32_master(dtype: str) -> None:
    """Refuse to train parameters stored in ``dtype`` (``model.dtype``) unless it is float32.

    Raises:
        ConfigError: ``dtype`` is a lower precision, whose AdamW steps would be lost to rounding.
    """
    if dtype != "float32":
        raise ConfigError(
            "model.dtype",
            f"AdamW would step {dtype} parameters, which drop every update below half a rounding step (at lr 1e-6 "
            "training silently does nothing); use model.dtype=float32 (fp32 master weights) with "
            "model.compute_dtype=auto or bfloat16 for bf16 compute",
        )
