"""Load any HF causal LM and its tokenizer, with errors a user can act on; a LoRA adapter folder loads as its base model
with the adapter merged in."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from tsctl.io.adapters import ADAPTER_WEIGHTS, adapter_base, is_adapter_folder
from tsctl.io.checkpoints import checkpoint_fix


class ModelLoadError(RuntimeError):
    """A model folder or hub id could not be loaded."""


def resolve_device(device: str) -> torch.device:
    """``auto`` picks cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("model.device=cuda but no CUDA device is visible; use model.device=cpu")
    return torch.device(device)


def resolve_dtype(dtype: str) -> torch.dtype:
    """The parameter dtype named by ``model.dtype`` (``float32`` or ``bfloat16``)."""
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]


def load_model(path: str | Path, dtype: str = "float32", device: str = "auto", key: str = "model.path") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a local folder or a hub id, parameters in ``dtype`` on ``device``.

    Training keeps float32 parameters and computes in a lower precision through autocast
    (:mod:`tsctl.models.precision`); ``bfloat16`` parameters are for inference only.

    ``key`` is the setting that named ``path``, quoted in the error messages. An adapter folder (a checkpoint or
    behaviour snapshot of a ``model.lora`` run: :mod:`tsctl.io.adapters`) gives its base model with the adapter merged
    into the weights (:func:`load_merged`): a plain model of the base's class.

    Raises:
        ModelLoadError: the folder is missing, a file, incomplete or damaged, or the hub is unreachable.
    """
    where = str(path)
    local = Path(where).expanduser()
    looks_local = where.startswith((".", "/", "~")) or local.exists() or where.startswith("runs")
    if looks_local and is_adapter_folder(local):
        return load_merged(local, dtype, device, key)
    if looks_local and local.exists() and not local.is_dir():
        raise ModelLoadError(f"{key}='{where}' is a file, not a model folder; point {key} at the folder that holds config.json and the weights")
    if looks_local and not local.is_dir():
        raise ModelLoadError(f"model folder '{where}' does not exist; pass {key}=<folder with config.json> or a hub id")
    if looks_local and not (local / "config.json").is_file():
        raise ModelLoadError(f"'{where}' is not an HF model folder (no config.json nor adapter_config.json); point {key} at a save_pretrained folder")
    dev = resolve_device(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=resolve_dtype(dtype))
    except (OSError, ValueError, SafetensorError) as err:
        if looks_local and (fix := checkpoint_fix(local)) is not None:
            hint = f"; this checkpoint's files are damaged or incomplete: {fix}"
        elif looks_local:
            hint = f"; its files are damaged or incomplete: save or download the model again, or point {key} at another folder"
        else:
            hint = f" (no local folder by that name; the hub may be unreachable: download it first or set {key} to a local folder)"
        first = str(err).splitlines()[0].rstrip(".") if str(err) else type(err).__name__
        raise ModelLoadError(f"could not load model '{where}': {first}{hint}") from None
    return model.to(dev), tokenizer


def load_merged(folder: Path, dtype: str, device: str, key: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The base model named in the adapter folder ``folder``, with the adapter merged into its weights (peft's
    ``merge_and_unload``: ``W + (alpha / rank) B A`` per target), and its tokenizer.

    Raises:
        ModelLoadError: peft is missing, the base model cannot be loaded, or the adapter's files are damaged.
    """
    try:
        from peft import PeftModel, get_peft_model_state_dict
    except ImportError:
        raise ModelLoadError(f"'{folder}' is a LoRA adapter, which needs peft to load: pip install -e \".[lora]\"") from None
    base = adapter_base(folder)
    try:
        model, tokenizer = load_model(base, dtype, device, key)
    except ModelLoadError as err:
        raise ModelLoadError(f"'{folder}' is a LoRA adapter of the base model '{base}', which cannot be loaded: {err}") from None
    fix = checkpoint_fix(folder) or "save the adapter again"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # keys that do not match are refused below, in one line
            adapted = PeftModel.from_pretrained(model, str(folder))
        saved = load_file(str(folder / ADAPTER_WEIGHTS))
    except (OSError, ValueError, RuntimeError, SafetensorError) as err:
        first = str(err).splitlines()[0].rstrip(".") if str(err) else type(err).__name__
        raise ModelLoadError(f"could not load the LoRA adapter '{folder}': {first}; its files are damaged or incomplete: {fix}") from None
    loaded = get_peft_model_state_dict(adapted, save_embedding_layers=False)
    if loaded.keys() != saved.keys():
        raise ModelLoadError(f"the LoRA adapter '{folder}' does not match its base model '{base}' (its weights name other modules): {fix}")
    return adapted.merge_and_unload(), tokenizer
