"""``engine.vllm.*``: the settings of the vllm engine (:mod:`tsctl.engines.vllm`), its block of the engine config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tsctl.config.ranges import in_range, one_of, positive

DTYPES = ("bfloat16", "float16", "float32")
"""Values of ``engine.vllm.dtype``."""


@dataclass
class VllmSettings:
    """The vllm engine's own settings (the sampling settings and ``batch_size`` are every engine's, ``engine.*``)."""

    gpu_memory_utilization: float = 0.5
    """Share of GPU memory vLLM may take while awake (weights + KV cache; the trainer needs the rest), 0.05 to 0.95."""
    tensor_parallel_size: int = 1
    """GPUs the engine's model is split over (weights reach them by CUDA IPC, not through the host)."""
    dtype: Optional[str] = None
    """dtype of vLLM's weights and compute (``bfloat16``, ``float16`` or ``float32``), whatever the trainer's; the
    trainer's weights are cast to it at every sync. Null = ``bfloat16`` on CUDA, ``float32`` on the CPU."""
    max_model_len: Optional[int] = None
    """Longest prompt + prefix + response, in tokens (sizes vLLM's KV cache); null = what the command needs, its longest
    prompt + ``engine.max_new_tokens``, within the model's ``max_position_embeddings``. A request that does not fit is
    refused, never cut short."""
    enable_sleep_mode: Optional[bool] = None
    """Discard vLLM's weights and KV cache during the update (sleep level 2) and bring them back after the weight sync,
    so vLLM and the trainer share one GPU. Null = on with CUDA, off on the CPU, where vLLM has no sleep mode (true is
    refused there)."""
    enforce_eager: bool = False
    """Skip vLLM's ``torch.compile`` and CUDA graphs: the engine starts in seconds instead of a minute, and decodes more
    slowly (tests and short runs)."""

    def __post_init__(self) -> None:
        in_range("engine.vllm.gpu_memory_utilization", self.gpu_memory_utilization, 0.05, 0.95)
        positive("engine.vllm.tensor_parallel_size", self.tensor_parallel_size)
        if self.dtype is not None:
            one_of("engine.vllm.dtype", self.dtype, DTYPES)
        if self.max_model_len is not None:
            positive("engine.vllm.max_model_len", self.max_model_len)
