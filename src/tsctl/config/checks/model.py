"""Checks of the ``model`` section (:mod:`tsctl.config.schema.model`)."""

from __future__ import annotations

from tsctl.config.errors import ConfigError
from tsctl.config.ranges import non_negative, one_of, positive
from tsctl.config.schema import TsctlConfig

DTYPES = ("float32", "bfloat16")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")


def check(cfg: TsctlConfig) -> None:
    """``model.*``: dtypes, device, the built-in model's shape and its warm-up."""
    m = cfg.model
    one_of("model.dtype", m.dtype, DTYPES)
    one_of("model.compute_dtype", m.compute_dtype, COMPUTE_DTYPES)
    if m.dtype == "bfloat16" and m.compute_dtype == "float32":
        raise ConfigError("model.compute_dtype", "float32 compute needs float32 parameters; use model.dtype=float32 or model.compute_dtype=auto")
    one_of("model.device", m.device, DEVICES)
    if m.tiny.hidden_size % m.tiny.num_heads:
        raise ConfigError("model.tiny.num_heads", f"{m.tiny.num_heads} must divide model.tiny.hidden_size={m.tiny.hidden_size}")
    for key in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings"):
        positive(f"model.tiny.{key}", getattr(m.tiny, key))
    positive("model.warmup.examples", m.warmup.examples)
    positive("model.warmup.batch_size", m.warmup.batch_size)
    positive("model.warmup.lr", m.warmup.lr)
    non_negative("model.warmup.weight_decay", m.warmup.weight_decay)
    non_negative("model.warmup.eval_problems", m.warmup.eval_problems)
    _lora(cfg)


def _lora(cfg: TsctlConfig) -> None:
    """``model.lora.*``: a rank of 0 (off) or more, a positive scale, a dropout below 1, target names that are names."""
    lora = cfg.model.lora
    non_negative("model.lora.rank", lora.rank)
    positive("model.lora.alpha", lora.alpha)
    if not 0 <= lora.dropout < 1:
        raise ConfigError("model.lora.dropout", f"{lora.dropout} is out of range; allowed: 0 <= model.lora.dropout < 1, e.g. model.lora.dropout=0.05")
    targets = lora.target_modules
    if targets is not None and (not targets or any(not name or "." in name or "*" in name for name in targets)):
        raise ConfigError(
            "model.lora.target_modules", f"{list(targets)} must list module names such as q_proj (no dots, no patterns), "
            "or be null for the model family's attention and MLP projections, e.g. model.lora.target_modules=[q_proj,v_proj]"
        )
