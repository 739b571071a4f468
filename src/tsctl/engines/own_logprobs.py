"""Whether a step's pi_old (and new seeds' pi_b) may be the rollout engine's own log-probs (``trainer.old_logprobs``).

The engine's log-probs equal a teacher-forced forward of the trainer's model up to float rounding
only when the engine runs the trainer's weights with the same numerics and samples from the full
tempered distribution: the ``hf`` engine (``reports_token_stats``), ``top_p=1``, float32 parameters
and compute. ``auto`` takes the engine's there and recomputes elsewhere (:mod:`tsctl.trainer.pi_old`).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine
from tsctl.models.precision import compute_dtype


def uses_engine_logprobs(cfg: TsctlConfig, engine: Engine, model: PreTrainedModel) -> bool:
    """True when pi_old (and pi_b of new seeds) comes from the engine's own log-probs, per ``trainer.old_logprobs``."""
    mode = cfg.trainer.old_logprobs
    if mode == "auto":
        fp32 = next(model.parameters()).dtype == torch.float32 and compute_dtype(cfg, model) == torch.float32
        return bool(getattr(engine, "reports_token_stats", False)) and cfg.engine.top_p == 1 and fp32
    return mode == "engine"
