"""Build the rollout engine named by ``engine.name``, and a model loaded to sample from (:func:`load_policy`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from transformers import PreTrainedModel

from tsctl.config.registry import Registry
from tsctl.config.schema import EngineConfig, TsctlConfig
from tsctl.engines.base import Engine
from tsctl.models import precision
from tsctl.models.loading import load_model
from tsctl.models.prompts import PromptFormatter

ENGINES: Registry[Callable[..., Engine]] = Registry("engine")
"""Engine builders by ``engine.name``."""


@ENGINES.register("hf")
def _build_hf(
    cfg: EngineConfig, model: PreTrainedModel, end_ids: Sequence[int], pad_id: int, model_path: str | None, seed: int,
    compute_dtype: torch.dtype | None,
) -> Engine:
    from tsctl.engines.hf import HFEngine

    return HFEngine(model, end_ids, pad_id=pad_id, batch_size=cfg.batch_size, compute_dtype=compute_dtype)


@ENGINES.register("vllm")
def _build_vllm(
    cfg: EngineConfig, model: PreTrainedModel, end_ids: Sequence[int], pad_id: int, model_path: str | None, seed: int,
    compute_dtype: torch.dtype | None,
) -> Engine:
    from tsctl.engines import vllm_platform
    from tsctl.engines.vllm import VLLMEngine

    vllm_platform.check_runs_here(cfg)
    vllm_platform.check_model_runs_here(model.config)
    if model_path is None:
        raise ValueError("the vllm engine loads the model from a folder: pass model_path (a save_pretrained folder)")
    dtype = vllm_platform.dtype(cfg)
    max_model_len = cfg.max_model_len or model.config.max_position_embeddings
    return VLLMEngine(
        model_path, end_ids, dtype=dtype, seed=seed, gpu_memory_utilization=cfg.gpu_memory_utilization,
        tensor_parallel_size=cfg.tensor_parallel_size, max_model_len=max_model_len, max_num_seqs=cfg.batch_size,
        enable_sleep_mode=vllm_platform.sleep_mode(cfg), enforce_eager=cfg.enforce_eager,
        kv_cache_bytes=vllm_platform.cpu_kv_cache_bytes(model.config, dtype, max_model_len, cfg.batch_size),
    )


def build_engine(
    cfg: EngineConfig, model: PreTrainedModel, end_ids: int | Sequence[int], pad_id: int, model_path: str | None = None, seed: int = 0,
    compute_dtype: torch.dtype | None = None,
) -> Engine:
    """Build the engine ``cfg.name`` for ``model``.

    Args:
        cfg: the engine config (name, batch size, vLLM memory, length, dtype, sleep mode, tensor parallelism).
        model: the policy; ``hf`` samples with this very object, ``vllm`` loads ``model_path`` and
            takes the model's context length when ``engine.max_model_len`` is null.
        end_ids: the token, or tokens, that end a sample (``PromptFormatter.end_ids``).
        pad_id: token used for padding (``hf`` only).
        model_path: folder holding the model's ``save_pretrained`` files (needed by ``vllm``).
        seed: the engine's sampling seed (``vllm`` only; ``hf`` reseeds per call from the sampling params).
        compute_dtype: the ``hf`` engine's autocast dtype (``model.compute_dtype`` resolved); None
            computes in the parameters' dtype (``vllm`` computes in ``engine.dtype``).
    """
    build = ENGINES.get(cfg.name)
    ends = (end_ids,) if isinstance(end_ids, int) else tuple(end_ids)
    return build(cfg, model, ends, pad_id, model_path, seed, compute_dtype)


@dataclass
class Policy:
    """A model to sample from: the model (eval mode), its prompt formatter and an engine over it."""

    model: PreTrainedModel
    formatter: PromptFormatter
    engine: Engine


def load_policy(cfg: TsctlConfig, path: str, key: str = "model.path") -> Policy:
    """The model at ``path`` (``model.dtype`` on ``model.device``, eval mode) with its formatter and an
    ``engine.name`` engine seeded with ``seed``, computing in ``model.compute_dtype``.

    ``key`` is the setting that named ``path`` (quoted in load errors).
    """
    model, tokenizer = load_model(path, cfg.model.dtype, cfg.model.device, key=key)
    model.eval()
    formatter = PromptFormatter(tokenizer, cfg.model.use_chat_template, model.generation_config)
    engine = build_engine(cfg.engine, model, formatter.end_ids, formatter.pad_id, str(path), seed=cfg.seed, compute_dtype=precision.compute_dtype(cfg, model))
    return Policy(model, formatter, engine)
