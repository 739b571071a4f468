"""Settings that cannot take effect: a key set away from its default while another key turns it off.

Every key whose effect depends on another key, and the decision for each (a non-default value
that is *refused* is one the user clearly expects to change the run; one *left* is harmless or
set by a group or preset file on purpose):

- ``ratio=0`` (no seeds; :func:`tsctl.config.knobs.uses_seeds`): ``truncation``, ``refresh``,
  every ``seeds.*`` key, ``algo.prefix_clip_c`` and ``algo.stale_mask`` are read only by Thinking Seeds: refused.
- ``truncation``: the ``seeds.*`` keys each strategy declares it ``reads`` (``seeds.fraction``
  for ``fixed``, ``seeds.lo``/``seeds.hi`` for ``uniform`` and ``boundary``, ``seeds.entropy_window``
  for ``entropy``, ``seeds.schedule*`` for ``schedule``): each refused under a strategy that does
  not read it. A strategy whose declared ``largest`` fraction is 0 (``fixed`` at
  ``seeds.fraction=0``, ``uniform``/``boundary`` at ``seeds.hi=0``, ``schedule`` from 0 to 0)
  cuts every seed at 0 tokens: refused.
- ``seeds.selector``: ``seeds.pool_size`` above 1 with a selector that keeps no ``pool`` (``latest``
  saves no snapshot), and the keys another selector declares it ``reads`` (``seeds.bandit``/
  ``seeds.bandit_c`` without ``bandit``, ``seeds.probe_*`` without ``max_entropy``): refused.
- ``seeds.source``: ``seeds.source_path`` with ``self``, ``seeds.trace_logprobs`` without
  ``traces``: refused.
- ``seeds.trace_logprobs``: ``seeds.shaping_gamma`` without ``shaping``; ``cap``/``shaping`` with
  ``seeds.train_prefix=false`` (no prefix token in the loss); ``algo.prefix_clip_c`` with ``shaping`` and
  ``seeds.source=traces`` (every prefix token is a shaped trace token, never clipped): refused.
- ``algo.stale_mask``: a mask with ``seeds.train_prefix=false`` (no seed-prefix token in the loss), or with
  ``seeds.source=traces`` and ``seeds.trace_logprobs=exclude|shaping`` (no prefix token in the loss, or none with a
  ratio to bound): refused; the keys of another mask's settings block (``algo.m2po.*`` without ``m2po``): refused, as below.
- ``algo.adv_estimator``, ``algo.policy_loss``, ``algo.aggregation``: the ``algo.*`` keys another entry declares it ``reads``
  (``algo.norm_adv_by_std``/``algo.adv_eps`` without the estimator ``grpo``; ``algo.clip_low``/``clip_high``/``clip_c``
  with the policy loss ``cispo``, and ``algo.prefix_clip_c`` with one that declares no ``prefix_clip``), and every key
  of another entry's settings block (``algo.cispo.*`` without ``cispo``): refused.
- ``algo.overlong``: ``algo.overlong_buffer``/``algo.overlong_penalty`` without ``penalty``: refused.
- ``algo.dynamic_sampling``: ``algo.max_resample_rounds`` when off: refused.
- ``task.reward``: ``task.reward_p`` without ``random``: refused.
- ``algo.rollout_correction``: ``algo.rollout_correction_cap`` with ``none``: refused.
- ``algo.kl_coef``: ``algo.ref_placement`` and ``algo.kl_type`` at 0 (no reference model is loaded, no KL term): refused.
- ``trainer.nonfinite``: ``trainer.max_nonfinite_skips`` with ``stop``: refused.
- ``model.lora.rank``: ``model.lora.alpha``/``dropout``/``target_modules`` at rank 0 (no adapter), and
  ``algo.ref_placement`` with an adapter (the reference is the policy with its adapter off, nothing to place): refused.
- Left: another engine's settings block (``engine.vllm.*`` with ``engine=hf``; ``--cfg job`` names them as unread) and
  ``model.tiny``/``model.warmup`` with another ``model.path`` (presets set them and a user may switch the
  engine or model on top); another task's settings block ``task.<name>.*`` (each task's group file sets its own); the
  ``trainer.eval_*`` sizes with ``trainer.eval_every=0`` (the final evaluation and ``tsctl eval``
  read them); ``trainer.checkpoint_on_signal`` (read on every signal).

A sweep (``tsctl ablate``) refuses a key only when it is idle at every point
(:func:`tsctl.stages.ablate.plan.plan`): ``ratio=0,25 refresh=5`` is two runs that differ; two points that
differ only in settings idle at them (``ratio=0,25 refresh=5,20``: both ``ratio=0`` points) are one run, refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from typing import Any

from tsctl.algo.advantages import ADVANTAGES
from tsctl.algo.aggregations import AGGREGATIONS
from tsctl.algo.losses import POLICY_LOSSES
from tsctl.algo.stale_masks import STALE_MASKS
from tsctl.config.errors import ConfigError
from tsctl.config.knobs import uses_seeds
from tsctl.config.registry import Registry
from tsctl.config.schema import TsctlConfig
from tsctl.config.schema.model import LoraConfig
from tsctl.config.schema.rl import AlgoConfig, SeedsConfig
from tsctl.config.schema.task import TaskConfig
from tsctl.config.schema.trainer import TrainerConfig
from tsctl.seeds.selectors import SELECTORS
from tsctl.seeds.sources import SOURCES
from tsctl.seeds.truncation import STRATEGIES

_SEEDS, _ALGO, _TRAINER, _TOP, _LORA = SeedsConfig(), AlgoConfig(), TrainerConfig(), TsctlConfig(), LoraConfig()

ALGO_ENTRIES = (POLICY_LOSSES, AGGREGATIONS, ADVANTAGES, STALE_MASKS)
"""The registries whose entries read ``algo.*`` keys and keep settings blocks in ``algo``, all refused when idle."""

Idle = tuple[str, str, str]
"""An idle key, why it cannot take effect, and the fix."""


def _changed(section: Any, default: Any, key: str) -> bool:
    return getattr(section, key) != getattr(default, key)


def idle_settings(cfg: TsctlConfig) -> list[ConfigError]:
    """One :class:`ConfigError` per key of ``cfg`` set away from its default that cannot take effect (see the module
    docstring); the registries' entries declare what they read and keep."""
    found = _seeds(cfg) if uses_seeds(cfg) else _without_seeds(cfg)
    for registry in ALGO_ENTRIES:
        found += _entry_keys(cfg.algo, registry)
    found += _algo_and_trainer(cfg)
    found += _task(cfg)
    found += _lora(cfg)
    return [ConfigError(key, f"{_value(cfg, key)!r} cannot take effect: {why}; {fix}") for key, why, fix in found]


def _value(cfg: TsctlConfig, key: str) -> Any:
    """The value of the dotted ``key`` in ``cfg``."""
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _without_seeds(cfg: TsctlConfig) -> list[Idle]:
    """``ratio=0``: every key only Thinking Seeds reads."""
    keys = [k for k in ("truncation", "refresh") if _changed(cfg, _TOP, k)]
    keys += [f"seeds.{f.name}" for f in fields(SeedsConfig) if _changed(cfg.seeds, _SEEDS, f.name)]
    keys += [f"algo.{k}" for k in ("prefix_clip_c", "stale_mask") if _changed(cfg.algo, _ALGO, k)]
    return [(key, "it is read by Thinking Seeds runs only and ratio=0", "set ratio > 0 (e.g. ratio=25) or drop it") for key in keys]


def _reads(registry: Registry, name: str) -> tuple[str, ...]:
    """The keys of its section the entry ``name`` reads: those it declares, and ``prefix_clip_c`` for a policy loss
    that declares ``prefix_clip``."""
    needs = registry.needs(name)
    return (*needs.reads, *(("prefix_clip_c",) if getattr(needs, "prefix_clip", False) else ()))


def _readers(registry: Registry) -> dict[str, list[str]]:
    """Each key some entry of ``registry`` reads (in its own section: ``seeds.*``, ``algo.*``) -> those entries, in registration order."""
    readers: dict[str, list[str]] = {}
    for name in registry.names():
        for key in _reads(registry, name):
            readers.setdefault(key, []).append(name)
    return readers


def _entry_keys(section: Any, registry: Registry) -> list[Idle]:
    """The keys of ``section`` (``cfg.algo``) that only entries of ``registry`` other than the chosen one read, and the
    keys of their settings blocks, set away from their defaults."""
    chosen, default, found = getattr(section, registry.key.rpartition(".")[2]), type(section)(), []
    for key, readers in sorted(_readers(registry).items()):
        if chosen not in readers and _changed(section, default, key):
            found.append((f"{registry.section}.{key}", f"it is read only with {registry.key}={'|'.join(readers)}", f"set {registry.key}={readers[0]} or drop it"))
    for name, block in registry.blocks().items():
        if name == chosen:
            continue
        own = registry.settings(name, section)
        for f in dataclasses.fields(block):
            if getattr(own, f.name) != getattr(block(), f.name):
                found.append((f"{registry.section}.{name}.{f.name}", f"it is read only with {registry.key}={name}", f"set {registry.key}={name} or drop it"))
    return found


def _seeds(cfg: TsctlConfig) -> list[Idle]:
    """``ratio > 0``: the ``seeds.*`` keys that the truncation, selector or source turn off."""
    strategies, selectors, sources = STRATEGIES, SELECTORS, SOURCES
    s, found = cfg.seeds, []
    cut = strategies.needs(cfg.truncation)
    for key in sorted(set(_readers(strategies)) - set(cut.reads)):
        if _changed(s, _SEEDS, key):
            found.append((f"seeds.{key}", f"truncation={cfg.truncation} does not read it", "drop it or choose the truncation that does"))
    if cut.largest is not None and cut.largest(s) == 0:
        found.append(("truncation", "every seed would be cut at 0 tokens, so no sample continues a prefix", "raise its fraction (e.g. seeds.fraction=0.5, seeds.hi=0.8) or use ratio=0"))
    if not selectors.needs(s.selector).pool and s.pool_size > 1:
        found.append(("seeds.pool_size", f"seeds.selector={s.selector} uses only the current weights and keeps no pool", "choose another seeds.selector or drop it"))
    for key, readers in sorted(_readers(selectors).items()):
        if s.selector not in readers and _changed(s, _SEEDS, key):
            found.append((f"seeds.{key}", f"it is read only with seeds.selector={'|'.join(readers)}", f"set seeds.selector={readers[0]} or drop it"))
    source = sources.needs(s.source)
    if source.path is None and s.source_path:
        takers = "|".join(name for name in sources.names() if sources.needs(name).path is not None)
        found.append(("seeds.source_path", f"seeds.source={s.source} reads no path (it writes seeds from the run's own snapshots)", f"set seeds.source={takers} or drop it"))
    if source.known_logprobs and _changed(s, _SEEDS, "trace_logprobs"):
        unknown = "|".join(name for name in sources.names() if not sources.needs(name).known_logprobs)
        found.append(("seeds.trace_logprobs", f"it is read only with seeds.source={unknown} (pi_b's log-probs unknown)", f"set seeds.source={unknown} or drop it"))
    return found + _trace_tokens(cfg)


def _trace_tokens(cfg: TsctlConfig) -> list[Idle]:
    """``ratio > 0``: the keys that the treatment of trace tokens (``seeds.trace_logprobs``) turns off."""
    s, found = cfg.seeds, []
    if s.trace_logprobs != "shaping" and _changed(s, _SEEDS, "shaping_gamma"):
        found.append(("seeds.shaping_gamma", f"it is read only with seeds.trace_logprobs=shaping (got {s.trace_logprobs})", "set seeds.trace_logprobs=shaping or drop it"))
    if not s.train_prefix and _changed(s, _SEEDS, "trace_logprobs"):
        found.append(("seeds.trace_logprobs", "seeds.train_prefix=false keeps every prefix token, trace tokens too, out of the loss", "drop one of them"))
    unknown = not SOURCES.needs(s.source).known_logprobs
    if unknown and s.trace_logprobs == "shaping" and _changed(cfg.algo, _ALGO, "prefix_clip_c"):
        found.append(("algo.prefix_clip_c", f"with seeds.source={s.source} every prefix token is a shaped trace token, which is never clipped", "drop it"))
    if unknown and cfg.algo.stale_mask != "none" and s.trace_logprobs != "cap":
        found.append(("algo.stale_mask", f"with seeds.source={s.source} and seeds.trace_logprobs={s.trace_logprobs} no prefix token keeps a ratio against pi_b in the loss to mask", "set seeds.trace_logprobs=cap or drop it"))
    return found


def _algo_and_trainer(cfg: TsctlConfig) -> list[Idle]:
    """The ``algo.*`` and ``trainer.*`` keys another key turns off (those of the registries' entries aside)."""
    al, tr, found = cfg.algo, cfg.trainer, []
    for key in ("overlong_buffer", "overlong_penalty"):
        if al.overlong != "penalty" and _changed(al, _ALGO, key):
            found.append((f"algo.{key}", f"it is read only with algo.overlong=penalty (got {al.overlong})", "set algo.overlong=penalty or drop it"))
    if not al.dynamic_sampling and _changed(al, _ALGO, "max_resample_rounds"):
        found.append(("algo.max_resample_rounds", "it is read only with algo.dynamic_sampling=true", "set algo.dynamic_sampling=true or drop it"))
    if al.rollout_correction == "none" and _changed(al, _ALGO, "rollout_correction_cap"):
        found.append(("algo.rollout_correction_cap", "algo.rollout_correction=none weights no token", "set algo.rollout_correction=tis or mis, or drop it"))
    if al.kl_coef == 0 and _changed(al, _ALGO, "ref_placement"):
        found.append(("algo.ref_placement", "algo.kl_coef=0 loads no reference model", "set algo.kl_coef > 0 or drop it"))
    if al.stale_mask != "none" and uses_seeds(cfg) and not cfg.seeds.train_prefix:
        found.append(("algo.stale_mask", "seeds.train_prefix=false leaves no seed-prefix token in the loss to mask", "drop one of them"))
    if al.kl_coef == 0 and _changed(al, _ALGO, "kl_type"):
        found.append(("algo.kl_type", "algo.kl_coef=0 has no KL term", "set algo.kl_coef > 0 (e.g. algo.kl_coef=0.1) or drop it"))
    if tr.nonfinite == "stop" and _changed(tr, _TRAINER, "max_nonfinite_skips"):
        found.append(("trainer.max_nonfinite_skips", "trainer.nonfinite=stop skips nothing", "set trainer.nonfinite=skip or drop it"))
    return found


def _task(cfg: TsctlConfig) -> list[Idle]:
    """``task.reward_p`` without the random reward."""
    if cfg.task.reward != "random" and cfg.task.reward_p != TaskConfig().reward_p:
        return [("task.reward_p", f"it is read only with task.reward=random (got {cfg.task.reward})", "set task.reward=random or drop it")]
    return []


def _lora(cfg: TsctlConfig) -> list[Idle]:
    """``model.lora.*`` without an adapter, and the reference's place with one."""
    lora = cfg.model.lora
    if lora.rank == 0:
        keys = [f"model.lora.{key}" for key in ("alpha", "dropout", "target_modules") if _changed(lora, _LORA, key)]
        return [(key, "model.lora.rank=0 trains every weight, no adapter", "set model.lora.rank > 0 (e.g. model.lora.rank=8) or drop it") for key in keys]
    if _changed(cfg.algo, _ALGO, "ref_placement"):
        return [("algo.ref_placement", "with model.lora the KL reference is the policy with its adapter switched off, no copy to place", "drop it")]
    return []
