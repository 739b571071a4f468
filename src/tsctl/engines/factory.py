"""Build the rollout engine named by ``engine.name`` in the config."""

from __future__ import annotations

from typing import Callable

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import EngineConfig
from tsctl.engines.base import Engine


def _build_hf(cfg: EngineConfig, model: PreTrainedModel, eos_id: int, pad_id: int, model_path: str | None, compute_dtype: torch.dtype | None) -> Engine:
    from tsctl.engines.hf import HFEngine

    return HFEngine(model, eos_id=eos_id, pad_id=pad_id, batch_size=cfg.batch_size, compute_dtype=compute_dtype)


def _build_vllm(cfg: EngineConfig, model: PreTrainedModel, eos_id: int, pad_id: int, model_path: str | None, compute_dtype: torch.dtype | None) -> Engine:
    from tsctl.engines.vllm import VLLMEngine

    if model_path is None:
        raise ValueError("the vllm engine loads the model from a folder: pass model_path (a save_pretrained folder)")
    return VLLMEngine(
        model_path, eos_id, dtype=str(model.dtype).removeprefix("torch."),
        gpu_memory_utilization=cfg.gpu_memory_utilization, tensor_parallel_size=cfg.tensor_parallel_size,
    )


ENGINES: dict[str, Callable[..., Engine]] = {"hf": _build_hf, "vllm": _build_vllm}
"""Engine builders by ``engine.name``."""


def build_engine(
    cfg: EngineConfig, model: PreTrainedModel, eos_id: int, pad_id: int, model_path: str | None = None,
    compute_dtype: torch.dtype | None = None,
) -> Engine:
    """Build the engine ``cfg.name`` for ``model``.

    Args:
        cfg: the engine config (name, batch size, vLLM memory share and tensor parallelism).
        model: the policy; ``hf`` samples with this very object, ``vllm`` takes its dtype.
        eos_id: token that ends a sample.
        pad_id: token used for padding (``hf`` only).
        model_path: folder holding the model's ``save_pretrained`` files (needed by ``vllm``).
        compute_dtype: the ``hf`` engine's autocast dtype (``model.compute_dtype`` resolved); None
            computes in the parameters' dtype.
    """
    if cfg.name not in ENGINES:
        raise ValueError(f"unknown engine {cfg.name!r}; valid engines: {', '.join(sorted(ENGINES))}")
    return ENGINES[cfg.name](cfg, model, eos_id, pad_id, model_path, compute_dtype)
