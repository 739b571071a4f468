"""Load any HF causal LM and its tokenizer, with errors a user can act on."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase


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


def load_model(path: str | Path, dtype: str = "float32", device: str = "auto") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a local folder or a hub id, parameters in ``dtype`` on ``device``.

    Training keeps float32 parameters and computes in a lower precision through autocast
    (:mod:`tsctl.models.precision`); ``bfloat16`` parameters are for inference only.

    Raises:
        ModelLoadError: the folder is missing or incomplete, or the hub is unreachable.
    """
    where = str(path)
    local = Path(where).expanduser()
    looks_local = where.startswith((".", "/", "~")) or local.exists() or where.startswith("runs")
    if looks_local and not local.is_dir():
        raise ModelLoadError(f"model folder '{where}' does not exist; pass model.path=<folder with config.json> or a hub id")
    if looks_local and not (local / "config.json").is_file():
        raise ModelLoadError(f"'{where}' is not an HF model folder (no config.json); point model.path at a save_pretrained folder")
    dev = resolve_device(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        model = AutoModelForCausalLM.from_pretrained(where, dtype=resolve_dtype(dtype))
    except (OSError, ValueError) as err:
        hint = "" if looks_local else " (no local folder by that name; the hub may be unreachable: download it first or set model.path to a local folder)"
        raise ModelLoadError(f"could not load model '{where}': {str(err).splitlines()[0]}{hint}") from None
    return model.to(dev), tokenizer
