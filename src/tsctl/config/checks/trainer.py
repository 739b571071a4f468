"""Checks of the ``trainer`` section (:mod:`tsctl.config.schema.trainer`)."""

from __future__ import annotations

from tsctl.config.errors import ConfigError
from tsctl.config.ranges import non_negative, one_of, positive
from tsctl.config.schema import TsctlConfig

LR_SCHEDULES = ("constant", "cosine")
"""Values of ``trainer.schedule``, the learning-rate schedule (:mod:`tsctl.trainer.optim`); not ``seeds.schedule``."""
NONFINITE = ("stop", "skip")
OLD_LOGPROBS = ("auto", "engine", "recompute")


def check(cfg: TsctlConfig) -> None:
    """``trainer.*``: sizes, the schedule, the non-finite policy, where pi_old comes from, the position bins."""
    tr = cfg.trainer
    for key in ("steps", "batch_size", "n", "mini_batches", "epochs", "lr"):
        positive(f"trainer.{key}", getattr(tr, key))
    positive("trainer.save_every", tr.save_every)
    positive("trainer.logits_chunk_mib", tr.logits_chunk_mib)
    for key in ("micro_batch_size", "micro_batch_tokens", "weight_decay", "warmup_steps", "max_grad_norm", "keep_checkpoints", "eval_every",
                "eval_problems", "eval_samples_problems"):
        non_negative(f"trainer.{key}", getattr(tr, key))
    positive("trainer.eval_samples", tr.eval_samples)
    one_of("trainer.schedule", tr.schedule, LR_SCHEDULES)
    one_of("trainer.nonfinite", tr.nonfinite, NONFINITE)
    non_negative("trainer.max_nonfinite_skips", tr.max_nonfinite_skips)
    one_of("trainer.old_logprobs", tr.old_logprobs, OLD_LOGPROBS)
    samples = tr.batch_size * tr.n
    if samples % tr.mini_batches:
        raise ConfigError("trainer.mini_batches", f"{tr.mini_batches} must divide trainer.batch_size * trainer.n = {samples}")
    if tr.n < 2:
        raise ConfigError("trainer.n", f"{tr.n}: group-normalised advantages need at least 2 samples per prompt")
    if list(tr.position_bins) != sorted(set(tr.position_bins)) or not tr.position_bins or tr.position_bins[0] != 0:
        raise ConfigError("trainer.position_bins", f"{list(tr.position_bins)} must be increasing left edges starting at 0")
