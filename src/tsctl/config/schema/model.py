"""The ``model`` group: which policy to train, its dtypes and device, the built-in model and its warm-up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class TinyModelConfig:
    """Architecture of the built-in tiny Llama-style model (used when ``model.path=builtin``)."""

    hidden_size: int = 160
    """Width of the residual stream."""
    num_layers: int = 4
    """Number of transformer blocks."""
    num_heads: int = 4
    """Attention heads (head_dim = hidden_size / num_heads)."""
    intermediate_size: int = 480
    """Width of the SwiGLU MLP."""
    max_position_embeddings: int = 256
    """Longest prompt + response the model can see, in tokens."""


@dataclass
class WarmupConfig:
    """Supervised warm-up of the built-in model on the task's worked solutions (``tsctl warmup``)."""

    examples: int = 40000
    """Training examples drawn from the task's train split (cycled if the split is smaller)."""
    batch_size: int = 64
    """Sequences per optimiser step."""
    lr: float = 3e-3
    """Peak learning rate (linear warm-up over 5% of steps, cosine decay to 10%)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    eval_problems: int = 1000
    """Held-out problems scored greedily after warm-up."""
    seed: int = 0
    """Seed of initialisation and data order (the warmed-up model is shared by all RL seeds)."""


@dataclass
class LoraConfig:
    """Low-rank adapters (LoRA, through ``peft``; ``pip install -e ".[lora]"``): train ``B A`` beside each target
    projection ``W`` (output ``W x + (alpha / rank) B A x``) and leave the base weights frozen.

    Off at ``rank=0``. With it on, the optimiser steps the adapter only, checkpoints and behaviour snapshots hold the
    adapter only (peft's folder: ``adapter_config.json`` naming the base model, ``adapter_model.safetensors``), and the
    KL reference is the base model: the policy with its adapter switched off, no second copy."""

    rank: int = 0
    """Rank ``r`` of each adapter; 0 trains every weight of the model (no adapter)."""
    alpha: float = 16.0
    """Scale numerator: the adapter's output is multiplied by ``alpha / rank``."""
    dropout: float = 0.0
    """Dropout on the adapter's input during the update's forward (0 <= dropout < 1); no forward without grad applies it."""
    target_modules: Optional[List[str]] = None
    """Names of the linear layers that get an adapter (the last part of the module name, e.g. ``[q_proj, v_proj]``);
    null: the model family's attention and MLP projections (``llama``, ``mistral``, ``qwen2``, ``qwen3``: q/k/v/o and
    gate/up/down; ``phi3``: qkv/o and gate_up/down; ``gpt2``: c_attn, c_proj, c_fc), and every linear layer but the
    LM head for any other family."""


@dataclass
class ModelConfig:
    """Which causal LM to train, and how to load it."""

    path: str = "builtin"
    """``builtin`` (the tiny model tsctl builds and warms up itself), a local HF folder, or a hub id."""
    dtype: str = "float32"
    """Parameter (master-weight) dtype: ``float32`` or ``bfloat16``. AdamW steps these parameters, so
    ``tsctl train`` needs ``float32`` (bf16 parameters lose updates below half a bf16 rounding step);
    ``bfloat16`` halves the memory of inference-only commands (``eval``, ``seed``, ``rollout``)."""
    compute_dtype: str = "auto"
    """Dtype the forwards compute in, through ``torch.autocast``: ``auto`` (bfloat16 on CUDA, float32
    elsewhere), ``float32`` or ``bfloat16``. Applies to the training forwards, pi_old and reference
    recomputes, and the ``hf`` engine; float32 enters no autocast at all."""
    device: str = "auto"
    """``auto`` (cuda when available), ``cpu`` or ``cuda``."""
    cache_dir: Optional[str] = None
    """Folder of the built-in model cache; null = ``<runs_dir>/_models`` (share one across runs_dirs to build once)."""
    use_chat_template: bool = True
    """Wrap prompts in the tokenizer's chat template when it has one."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Architecture of the built-in model."""
    warmup: WarmupConfig = field(default_factory=WarmupConfig)
    """How the built-in model is warmed up before RL."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Train low-rank adapters instead of every weight (off by default: ``model.lora.rank=0``)."""
