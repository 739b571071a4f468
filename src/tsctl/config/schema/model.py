"""The ``model`` group: which policy to train, its dtypes and device, the built-in model and its warm-up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


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
