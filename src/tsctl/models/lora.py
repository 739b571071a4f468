"""LoRA adapters on the policy (``model.lora``), through peft.

The adapter is injected into the model's own modules (``peft.inject_adapter_in_model``): the policy stays the same
transformers model class, its target projections become peft ``lora.Linear`` layers computing
``W x + (alpha / rank) B A x``, and every forward of the toolkit (padded, packed, shared prompts, activation
checkpointing, the ``hf`` engine) runs it unchanged. Only ``lora_A``/``lora_B`` require grad. ``B`` starts at zero,
so a new adapter's policy is exactly the base model; ``A`` is drawn from the run's seed without touching the
global random streams.

:func:`adapter_off` is the KL reference (the base model, no second copy). The adapter's weights on disk are peft's
folder (:mod:`tsctl.io.adapters`); :func:`load_adapter_weights` and :func:`adapter_state` move them in and out, and
:func:`swapped_adapter` lends the model an older adapter (a behaviour snapshot's) for a block.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import torch
from safetensors.torch import load_file

from tsctl.config.errors import ConfigError
from tsctl.config.schema import LoraConfig
from tsctl.io.adapters import ADAPTER_NAME, ADAPTER_WEIGHTS, KEY_PREFIX, has_adapter
from tsctl.models.loading import ModelLoadError

LLAMA_STYLE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
FAMILY_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": LLAMA_STYLE,
    "mistral": LLAMA_STYLE,
    "qwen2": LLAMA_STYLE,
    "qwen3": LLAMA_STYLE,
    "phi3": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    "gpt2": ("c_attn", "c_proj", "c_fc"),
}
"""The attention and MLP projections of each model family (``config.model_type``) that get an adapter by default."""
EVERY_LINEAR = "all-linear"
"""peft's name for every linear layer but the LM head: the default of any other family."""


class LoraUnavailable(ModelLoadError):
    """``model.lora`` is on and peft is not installed."""


def lora_on(settings: LoraConfig) -> bool:
    """Whether ``model.lora`` asks for an adapter (``rank > 0``)."""
    return settings.rank > 0


def target_modules(settings: LoraConfig, model: torch.nn.Module) -> list[str] | str:
    """The module names ``settings`` adapts: ``model.lora.target_modules``, else the model family's default."""
    if settings.target_modules is not None:
        return list(settings.target_modules)
    family = getattr(getattr(model, "config", None), "model_type", None)
    return list(FAMILY_TARGETS[family]) if family in FAMILY_TARGETS else EVERY_LINEAR


def add_adapter(model: torch.nn.Module, settings: LoraConfig, base: str, seed: int) -> None:
    """Inject a new adapter into ``model`` in place and freeze every base weight.

    Args:
        model: the policy (float32 parameters).
        settings: ``model.lora``.
        base: the base model's folder or hub id, written into the adapter's folder (``base_model_name_or_path``).
        seed: seeds the draw of every ``A`` (``B`` is zero); the global random streams are left as they were.

    Raises:
        LoraUnavailable: peft is not installed.
        ConfigError: no module of the model matches ``model.lora.target_modules``.
    """
    peft = _peft()
    config = peft.LoraConfig(
        r=settings.rank, lora_alpha=settings.alpha, lora_dropout=settings.dropout, bias="none",
        target_modules=target_modules(settings, model), base_model_name_or_path=base,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        try:
            peft.inject_adapter_in_model(config, model, adapter_name=ADAPTER_NAME)
        except ValueError as err:
            first = str(err).splitlines()[0]
            raise ConfigError("model.lora.target_modules", f"{first}; name linear layers of this model, e.g. model.lora.target_modules=[q_proj,v_proj]") from None
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(".lora_" in name)


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the optimiser steps: the adapter's where ``model`` carries one, else every parameter."""
    return [p for p in model.parameters() if p.requires_grad] if has_adapter(model) else list(model.parameters())


@contextlib.contextmanager
def adapter_off(model: torch.nn.Module) -> Iterator[None]:
    """Run the block with ``model``'s adapter switched off (the base model's function), then switch it on again.

    Nothing when ``model`` carries no adapter.
    """
    if not has_adapter(model):
        yield
        return
    layers = [m for m in model.modules() if isinstance(m, _peft().tuners.tuners_utils.BaseTunerLayer)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of ``model``'s adapter weights, keyed by the model's own module names (``model.layers.0...lora_A.weight``)."""
    state = _peft().get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME, save_embedding_layers=False)
    return {name: tensor.detach().clone() for name, tensor in state.items()}


def set_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` (keys of :func:`adapter_state`) into ``model``'s adapter; every adapter weight must be given.

    Raises:
        KeyError: ``state`` misses an adapter weight of ``model`` or holds one it does not have.
    """
    own = adapter_state(model)
    if own.keys() != state.keys():
        missing, unexpected = sorted(own.keys() - state.keys()), sorted(state.keys() - own.keys())
        raise KeyError(f"the adapter does not match the model's: missing {missing[:3]}, unexpected {unexpected[:3]}")
    with torch.no_grad():
        _peft().set_peft_model_state_dict(model, {k: v.to(own[k].device) for k, v in state.items()}, adapter_name=ADAPTER_NAME)


def load_adapter_weights(model: torch.nn.Module, folder: str | Path) -> None:
    """Copy the adapter saved in ``folder`` into ``model``'s adapter (same targets and rank)."""
    saved = load_file(str(Path(folder) / ADAPTER_WEIGHTS))
    set_adapter_state(model, {name.removeprefix(KEY_PREFIX): tensor for name, tensor in saved.items()})


@contextlib.contextmanager
def swapped_adapter(model: torch.nn.Module, folder: str | Path) -> Iterator[None]:
    """Run the block with the adapter saved in ``folder`` (same targets and rank) in place of ``model``'s own, then put
    ``model``'s own back, bit for bit."""
    own = adapter_state(model)
    load_adapter_weights(model, folder)
    try:
        yield
    finally:
        set_adapter_state(model, own)


def base_reference(path: str | Path) -> str:
    """How an adapter names its base ``path``: an existing local folder by its absolute path, a hub id as given."""
    local = Path(path).expanduser()
    return str(local.resolve()) if local.is_dir() else str(path)


def _peft():  # noqa: ANN202 - the peft module
    try:
        import peft
        import peft.tuners.tuners_utils  # noqa: F401 - BaseTunerLayer
    except ImportError:
        raise LoraUnavailable('model.lora needs peft, which is not installed: pip install -e ".[lora]"') from None
    return peft
