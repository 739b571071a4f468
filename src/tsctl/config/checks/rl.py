"""Checks of the ``engine``, ``algo`` and ``seeds`` sections (:mod:`tsctl.config.schema.rl`), and the top-level
Thinking Seeds knobs ``ratio`` and ``refresh``."""

from __future__ import annotations

import math

from tsctl.config.errors import ConfigError
from tsctl.config.ranges import in_range, non_negative, one_of, positive
from tsctl.config.schema import TsctlConfig

REF_PLACEMENTS = ("policy", "cpu", "offload")
OVERLONG = ("none", "mask", "penalty")
ADV_GROUPS = ("all", "plain")


def check(cfg: TsctlConfig) -> None:
    """``ratio``, ``refresh``, ``engine.*``, ``algo.*`` and ``seeds.*``."""
    in_range("ratio", cfg.ratio, 0, 100, " (percent of each group's samples that are seeded)")
    non_negative("refresh", cfg.refresh)
    _engine(cfg)
    _algo(cfg)
    _seeds(cfg)


def _engine(cfg: TsctlConfig) -> None:
    e = cfg.engine
    non_negative("engine.temperature", e.temperature)
    if not 0 < e.top_p <= 1:
        raise ConfigError("engine.top_p", f"{e.top_p} is out of range; allowed: 0 < engine.top_p <= 1")
    positive("engine.max_new_tokens", e.max_new_tokens)
    positive("engine.batch_size", e.batch_size)


def _algo(cfg: TsctlConfig) -> None:
    al = cfg.algo
    in_range("algo.clip_low", al.clip_low, 0.0, 1.0)
    non_negative("algo.clip_high", al.clip_high)
    if al.clip_c is not None and al.clip_c <= 1:
        raise ConfigError("algo.clip_c", f"{al.clip_c} must be > 1 (or null to disable dual clip)")
    if al.prefix_clip_c is not None and al.prefix_clip_c <= 1:
        raise ConfigError("algo.prefix_clip_c", f"{al.prefix_clip_c} must be > 1 (or null to leave prefix tokens to algo.clip_c)")
    positive("algo.adv_eps", al.adv_eps)
    non_negative("algo.kl_coef", al.kl_coef)
    one_of("algo.ref_placement", al.ref_placement, REF_PLACEMENTS)
    non_negative("algo.entropy_coef", al.entropy_coef)
    non_negative("algo.max_resample_rounds", al.max_resample_rounds)
    one_of("algo.overlong", al.overlong, OVERLONG)
    if al.overlong == "penalty" and not 0 < al.overlong_buffer < cfg.engine.max_new_tokens:
        raise ConfigError("algo.overlong_buffer", f"{al.overlong_buffer} must be in (0, engine.max_new_tokens={cfg.engine.max_new_tokens})")
    if al.rollout_correction_cap < 1:
        raise ConfigError("algo.rollout_correction_cap", f"{al.rollout_correction_cap} must be >= 1 (the largest weight pi_old / pi_engine a token may take; e.g. 2)")


def _seeds(cfg: TsctlConfig) -> None:
    s = cfg.seeds
    for key in ("fraction", "lo", "hi", "entropy_window", "schedule_start", "schedule_end", "target_pass", "controller_band"):
        in_range(f"seeds.{key}", getattr(s, key), 0.0, 1.0)
    positive("seeds.controller_prior", s.controller_prior)
    if not 0 < s.shaping_gamma < math.inf:
        raise ConfigError("seeds.shaping_gamma", f"{s.shaping_gamma} is out of range; allowed: 0 < seeds.shaping_gamma < inf (LUFFY's 0.1)")
    if s.lo > s.hi:
        raise ConfigError("seeds.lo", f"seeds.lo={s.lo} must be <= seeds.hi={s.hi}")
    one_of("seeds.adv_group", s.adv_group, ADV_GROUPS)
    positive("seeds.pool_size", s.pool_size)
    positive("seeds.bandit_c", s.bandit_c)
    positive("seeds.probe_prompts", s.probe_prompts)
    positive("seeds.probe_samples", s.probe_samples)
