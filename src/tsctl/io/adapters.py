"""A policy's weights on disk: the whole HF folder, or, for a model that carries a LoRA adapter, the adapter alone.

An adapter folder is peft's own format, which ``peft.PeftModel.from_pretrained`` and vLLM's ``LoRARequest`` read:
``adapter_config.json`` (rank, scale, target modules and ``base_model_name_or_path``, the base model's folder or hub
id) and ``adapter_model.safetensors`` (the ``lora_A``/``lora_B`` weights, keyed ``base_model.model.<module>.lora_A.weight``). It has no
``config.json``: the base's architecture is the base folder's. :mod:`tsctl.models.lora` puts adapters on models and
loads these folders back.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

ADAPTER_CONFIG = "adapter_config.json"
"""The file that makes a folder an adapter folder."""
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_NAME = "default"
"""The one adapter a policy carries (peft's default name)."""
KEY_PREFIX = "base_model.model."
"""What peft's folders put before a module's name (``PeftModel`` wraps the model as ``base_model.model``)."""


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

    model.peft_config[ADAPTER_NAME].save_pretrained(str(folder))
    own = get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME, save_embedding_layers=False)  # keys of the model's own modules
    state = {KEY_PREFIX + name: tensor.detach().contiguous() for name, tensor in own.items()}
    save_file(state, str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})
