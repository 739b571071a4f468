"""Range checks that types alone cannot express.

OmegaConf already rejects unknown keys and wrong types while composing; this module checks what
is left (ranges, fixed choices, knobs that must agree) and raises :class:`ConfigError` naming the
key and what is allowed. Names that must exist in a registry of a higher layer (``algo.loss``,
``truncation``, ``task.name``, ``engine.name``, ``seeds.selector``, ...) and checks that need a
package's own logic (how many samples ``ratio`` seeds) are checked by the command's composition
step, :mod:`tsctl.stages.compose`, with :func:`one_of`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig

DTYPES = ("float32", "bfloat16")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")
ENGINE_DTYPES = ("bfloat16", "float16", "float32")
REF_PLACEMENTS = ("policy", "cpu", "offload")
OLD_LOGPROBS = ("auto", "engine", "recompute")
DEVICES = ("auto", "cpu", "cuda")
OVERLONG = ("none", "mask", "penalty")
ROLLOUT_CORRECTIONS = ("none", "tis", "mis")
"""Values of ``algo.rollout_correction``: ``none`` and the modes of :data:`tsctl.algo.rollout_correction.CORRECTIONS`."""
OVERLONG_PROMPTS = ("error", "drop")
ADV_GROUPS = ("all", "plain")
SCHEDULES = ("constant", "cosine")
NONFINITE = ("stop", "skip")
LOGGERS = ("console", "wandb")
WANDB_MODES = ("offline", "online", "disabled")
BAD_ROW = ("error", "skip")


def one_of(key: str, value: str, allowed: Iterable[str]) -> None:
    """Raise :class:`ConfigError` unless ``value`` (of ``key``) is one of ``allowed``."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(key, f"unknown value {value!r}; choose one of {', '.join(allowed)}")


def _in_range(key: str, value: float, lo: float, hi: float, what: str = "") -> None:
    if not lo <= value <= hi:
        raise ConfigError(key, f"{value} is out of range; allowed: {lo} <= {key} <= {hi}{what}")


def _positive(key: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(key, f"{value} must be > 0")


def _non_negative(key: str, value: float) -> None:
    if value < 0:
        raise ConfigError(key, f"{value} must be >= 0")


def _run_place(cfg: TsctlConfig) -> None:
    """``name`` is one folder name and ``experiment`` a relative path without ``..``: a run stays inside ``runs_dir``."""
    if cfg.name is not None and (not cfg.name or cfg.name in (".", "..") or any(c in cfg.name for c in "/\\\0")):
        raise ConfigError("name", f"{cfg.name!r} is not a plain folder name (no '/', no '..'), so the run would land outside <runs_dir>/<experiment>/; e.g. name=lr-2e-5")
    parts = Path(cfg.experiment).parts
    if not parts or Path(cfg.experiment).is_absolute() or ".." in parts or "\0" in cfg.experiment:
        raise ConfigError("experiment", f"{cfg.experiment!r} must be a relative folder path without '..' (it would write outside runs_dir=); e.g. experiment=countdown/lr-sweep")


def validate(cfg: TsctlConfig) -> TsctlConfig:
    """Check every knob of ``cfg``; return it unchanged or raise :class:`ConfigError`."""
    _run_place(cfg)
    _in_range("ratio", cfg.ratio, 0, 100, " (percent of each group's samples that are seeded)")
    _non_negative("refresh", cfg.refresh)

    m = cfg.model
    one_of("model.dtype", m.dtype, DTYPES)
    one_of("model.compute_dtype", m.compute_dtype, COMPUTE_DTYPES)
    if m.dtype == "bfloat16" and m.compute_dtype == "float32":
        raise ConfigError("model.compute_dtype", "float32 compute needs float32 parameters; use model.dtype=float32 or model.compute_dtype=auto")
    one_of("model.device", m.device, DEVICES)
    if m.tiny.hidden_size % m.tiny.num_heads:
        raise ConfigError("model.tiny.num_heads", f"{m.tiny.num_heads} must divide model.tiny.hidden_size={m.tiny.hidden_size}")
    for key in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position_embeddings"):
        _positive(f"model.tiny.{key}", getattr(m.tiny, key))
    _positive("model.warmup.examples", m.warmup.examples)
    _positive("model.warmup.batch_size", m.warmup.batch_size)
    _positive("model.warmup.lr", m.warmup.lr)

    t = cfg.task
    _positive("task.heldout_size", t.heldout_size)
    _positive("task.train_size", t.train_size)
    c = t.countdown
    if not 2 <= c.min_numbers <= c.max_numbers <= 5:
        raise ConfigError("task.countdown.min_numbers", "need 2 <= min_numbers <= max_numbers <= 5 (4 is fast; 5 takes minutes to generate)")
    a = t.arithmetic
    if not 2 <= a.min_terms <= a.max_terms:
        raise ConfigError("task.arithmetic.min_terms", "need 2 <= min_terms <= max_terms")
    _in_range("task.arithmetic.max_digits", a.max_digits, 1, 6)
    one_of("task.overlong_prompts", t.overlong_prompts, OVERLONG_PROMPTS)
    one_of("task.file.on_bad_row", t.file.on_bad_row, BAD_ROW)
    _in_range("task.file.heldout_fraction", t.file.heldout_fraction, 0.0, 0.9)

    e = cfg.engine
    _non_negative("engine.temperature", e.temperature)
    if not 0 < e.top_p <= 1:
        raise ConfigError("engine.top_p", f"{e.top_p} is out of range; allowed: 0 < engine.top_p <= 1")
    _positive("engine.max_new_tokens", e.max_new_tokens)
    _positive("engine.batch_size", e.batch_size)
    _in_range("engine.gpu_memory_utilization", e.gpu_memory_utilization, 0.05, 0.95)
    _positive("engine.tensor_parallel_size", e.tensor_parallel_size)
    if e.dtype is not None:
        one_of("engine.dtype", e.dtype, ENGINE_DTYPES)
    if e.max_model_len is not None and e.max_model_len <= e.max_new_tokens:
        raise ConfigError("engine.max_model_len", f"{e.max_model_len} must exceed engine.max_new_tokens={e.max_new_tokens} (prompts need room too)")

    al = cfg.algo
    _in_range("algo.clip_low", al.clip_low, 0.0, 1.0)
    _non_negative("algo.clip_high", al.clip_high)
    if al.clip_c is not None and al.clip_c <= 1:
        raise ConfigError("algo.clip_c", f"{al.clip_c} must be > 1 (or null to disable dual clip)")
    if al.prefix_clip_c is not None and al.prefix_clip_c <= 1:
        raise ConfigError("algo.prefix_clip_c", f"{al.prefix_clip_c} must be > 1 (or null to leave prefix tokens to algo.clip_c)")
    _positive("algo.adv_eps", al.adv_eps)
    _non_negative("algo.kl_coef", al.kl_coef)
    one_of("algo.ref_placement", al.ref_placement, REF_PLACEMENTS)
    _non_negative("algo.entropy_coef", al.entropy_coef)
    _non_negative("algo.max_resample_rounds", al.max_resample_rounds)
    one_of("algo.overlong", al.overlong, OVERLONG)
    if al.overlong == "penalty" and not 0 < al.overlong_buffer < e.max_new_tokens:
        raise ConfigError("algo.overlong_buffer", f"{al.overlong_buffer} must be in (0, engine.max_new_tokens={e.max_new_tokens})")
    one_of("algo.rollout_correction", al.rollout_correction, ROLLOUT_CORRECTIONS)
    if al.rollout_correction_cap < 1:
        raise ConfigError("algo.rollout_correction_cap", f"{al.rollout_correction_cap} must be >= 1 (the largest weight pi_old / pi_engine a token may take; e.g. 2)")

    s = cfg.seeds
    for key in ("fraction", "lo", "hi", "entropy_window", "schedule_start", "schedule_end"):
        _in_range(f"seeds.{key}", getattr(s, key), 0.0, 1.0)
    if s.lo > s.hi:
        raise ConfigError("seeds.lo", f"seeds.lo={s.lo} must be <= seeds.hi={s.hi}")
    one_of("seeds.adv_group", s.adv_group, ADV_GROUPS)
    _validate_behaviour(cfg)

    tr = cfg.trainer
    for key in ("steps", "batch_size", "n", "mini_batches", "epochs", "lr"):
        _positive(f"trainer.{key}", getattr(tr, key))
    _positive("trainer.save_every", tr.save_every)
    _positive("trainer.logits_chunk_mib", tr.logits_chunk_mib)
    for key in ("micro_batch_size", "micro_batch_tokens", "weight_decay", "warmup_steps", "max_grad_norm", "keep_checkpoints", "eval_every"):
        _non_negative(f"trainer.{key}", getattr(tr, key))
    one_of("trainer.schedule", tr.schedule, SCHEDULES)
    one_of("trainer.nonfinite", tr.nonfinite, NONFINITE)
    _non_negative("trainer.max_nonfinite_skips", tr.max_nonfinite_skips)
    one_of("trainer.old_logprobs", tr.old_logprobs, OLD_LOGPROBS)
    samples = tr.batch_size * tr.n
    if samples % tr.mini_batches:
        raise ConfigError("trainer.mini_batches", f"{tr.mini_batches} must divide trainer.batch_size * trainer.n = {samples}")
    if tr.n < 2:
        raise ConfigError("trainer.n", f"{tr.n}: group-normalised advantages need at least 2 samples per prompt")
    if list(tr.position_bins) != sorted(set(tr.position_bins)) or not tr.position_bins or tr.position_bins[0] != 0:
        raise ConfigError("trainer.position_bins", f"{list(tr.position_bins)} must be increasing left edges starting at 0")

    ev = cfg.eval
    _positive("eval.k", ev.k)
    if any(k < 1 or k > ev.k for k in ev.pass_k):
        raise ConfigError("eval.pass_k", f"{list(ev.pass_k)}: every k must be in 1..eval.k={ev.k}")
    if ev.limit is not None:
        _positive("eval.limit", ev.limit)
    one_of("eval.on_bad_row", ev.on_bad_row, BAD_ROW)

    rep = cfg.report
    if not 0 < rep.level < 1:
        raise ConfigError("report.level", f"{rep.level} is out of range; allowed: 0 < report.level < 1 (e.g. 0.95)")
    if rep.baseline is not None and (not rep.baseline.split() or any("=" not in part[1:] for part in rep.baseline.split())):
        raise ConfigError("report.baseline", f"{rep.baseline!r}: write it as key=value, e.g. report.baseline=ratio=0")
    if rep.equivalence_margin is not None and not 0 < rep.equivalence_margin < 1:
        raise ConfigError("report.equivalence_margin", f"{rep.equivalence_margin} is out of range; allowed: null or 0 < margin < 1 "
                          "(a fraction of problems, e.g. 0.02)")

    one_of("logger.name", cfg.logger.name, LOGGERS)
    one_of("logger.wandb_mode", cfg.logger.wandb_mode, WANDB_MODES)
    return cfg


def _validate_behaviour(cfg: TsctlConfig) -> None:
    """The behaviour pool, its selector and the seed source (``seeds.selector``, ``seeds.source``, ...)."""
    s = cfg.seeds
    _positive("seeds.pool_size", s.pool_size)
    _positive("seeds.bandit_c", s.bandit_c)
    _positive("seeds.probe_prompts", s.probe_prompts)
    _positive("seeds.probe_samples", s.probe_samples)
    if s.source != "self" and not s.source_path:
        what = "an HF model folder or hub id" if s.source == "model" else "a JSONL or Parquet file of traces"
        raise ConfigError("seeds.source_path", f"seeds.source={s.source} needs {what}: seeds.source_path=<path>")
    if s.source == "traces":
        if not Path(s.source_path).is_file():
            raise ConfigError("seeds.source_path", f"trace file {s.source_path} does not exist")
