"""A policy's weights on disk: the whole HF folder, or, for a model that carries a LoRA adapter, the adapter alone.

An adapter folder is peft's own format, which ``peft.PeftModel.from_pretrained`` and vLLM's ``LoRARequest`` read:
``adapter_config.json`` (rank, scale, target modules and ``base_model_name_or_path``, the base model's folder or hub
id) and ``adapter_model.safetensors`` (the ``lora_A``/``lora_B`` weights, keyed ``base_model.model.<module>.lora_A.weight``). It has no
``config.json``: the base's architecture is the base folder's. :mod:`tsctl.models.lora` puts adapters on models and
loads these folders back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

ADAPTER_CONFIG = "adapter_config.json"
"""The file that makes a folder an adapter folder."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_NAME = "default"
"""The one adapter a policy carries (peft's default name)."""
KEY_PREFIX = "base_model.model."
"""What peft's folders put before a module's name (``PeftModel`` wraps the model as ``base_model.model``)."""
_ADAPTER_SEGMENT = re.compile(rf"(\.lora_\w+)\.{ADAPTER_NAME}(?=\.|$)")
"""The adapter's name after a LoRA weight's own (``q_proj.lora_A.default.weight``), which the folder's keys leave out."""


def has_adapter(model: torch.nn.Module) -> bool:
    """Whether ``model`` carries a peft adapter (injected into its own modules)."""
    return bool(getattr(model, "peft_config", None))


def holds_weights(folder: Path) -> bool:
    """Whether ``folder`` holds a model: an HF folder (``config.json``) or an adapter folder (``adapter_config.json``)."""
    return (folder / "config.json").is_file() or (folder / ADAPTER_CONFIG).is_file()


def is_adapter_folder(folder: str | Path) -> bool:
    """Whether ``folder`` is an adapter folder (see the module docstring)."""
    return (Path(folder).expanduser() / ADAPTER_CONFIG).is_file()


def adapter_base(folder: str | Path) -> str:
    """The base model (folder or hub id) the adapter in ``folder`` was trained on."""
    return str(json.loads((Path(folder).expanduser() / ADAPTER_CONFIG).read_text())["base_model_name_or_path"])


def save_weights(model: torch.nn.Module, folder: Path) -> None:
    """Write ``model``'s weights into ``folder``: the adapter alone when it carries one, else ``save_pretrained``."""
    if not has_adapter(model):
        model.save_pretrained(folder)
        return
    from peft import get_peft_model_state_dict

    own = get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME, save_embedding_layers=False)  # keys of the model's own modules
    write_adapter(folder, model.peft_config[ADAPTER_NAME], {KEY_PREFIX + name: tensor.detach().contiguous() for name, tensor in own.items()})


def write_adapter(folder: Path, config: Any, tensors: dict[str, torch.Tensor]) -> None:
    """Write an adapter folder: ``config`` (peft's ``LoraConfig``) and ``tensors`` (keys of the folder's file)."""
    config.save_pretrained(str(folder))
    save_file(tensors, str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})


def adapter_file_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter weights of a model's ``state_dict`` under the keys of its folder's file.

    ``<module>.lora_A.default.weight`` [r, in] becomes ``base_model.model.<module>.lora_A.weight`` (and so for
    ``lora_B`` [out, r]); every other tensor (the base weights) is left out. Tensors are detached, on the CPU and contiguous.
    """
    return {KEY_PREFIX + _ADAPTER_SEGMENT.sub(r"\1", name): tensor.detach().cpu().contiguous() for name, tensor in state.items() if ".lora_" in name}
