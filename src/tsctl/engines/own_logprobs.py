"""Whether a step's pi_old (and new seeds' pi_b) may be the rollout engine's own log-probs (``trainer.old_logprobs``).

The engine's log-probs equal a teacher-forced forward of the trainer's model up to float rounding
only when the engine runs the trainer's weights with the same numerics and samples from the full
tempered distribution: the ``hf`` engine (``reports_token_stats``), ``top_p=1``, float32 parameters
and compute. ``auto`` takes the engine's there and recomputes elsewhere (:mod:`tsctl.trainer.pi_old`);
``engine`` is refused with an engine whose log-probs may not stand for the trainer's, or with a nucleus
(:func:`check_old_logprobs`). Both rules of ``trainer.old_logprobs`` live here.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine
from tsctl.engines.registry import ENGINES
from tsctl.models.precision import compute_dtype


def check_old_logprobs(cfg: TsctlConfig) -> None:
    """Refuse ``trainer.old_logprobs=engine`` where the engine's log-probs cannot stand for the trainer's: an engine that
    does not declare ``own_logprobs`` (other numerics than the trainer's), or ``engine.top_p < 1`` (a nucleus changes
    the distribution the tokens were drawn from)."""
    e = cfg.engine
    if cfg.trainer.old_logprobs == "engine" and (not ENGINES.needs(e.name).own_logprobs or e.top_p != 1):
        raise ConfigError(
            "trainer.old_logprobs",
            f"'engine' needs engine=hf with engine.top_p=1 (got engine={e.name}, top_p={e.top_p:g}): other engines' "
            "numerics differ from the trainer's and a nucleus changes the distribution; use auto or recompute",
        )


def uses_engine_logprobs(cfg: TsctlConfig, engine: Engine, model: PreTrainedModel) -> bool:
    """True when pi_old (and pi_b of new seeds) comes from the engine's own log-probs, per ``trainer.old_logprobs``."""
    mode = cfg.trainer.old_logprobs
    if mode == "auto":
        fp32 = next(model.parameters()).dtype == torch.float32 and compute_dtype(cfg, model) == torch.float32
        return bool(getattr(engine, "reports_token_stats", False)) and cfg.engine.top_p == 1 and fp32
    return mode == "engine"
