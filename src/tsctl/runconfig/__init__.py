"""Every command's config: composed onto the schema with the registries' settings blocks, then checked.

A config is refused in one line (:class:`~tsctl.config.errors.ConfigError`), and each kind of refusal has one home:

- a key the schema lacks, a value of the wrong type, an unknown group option: Hydra and OmegaConf while composing
  (:mod:`tsctl.config.compose`; a settings block's keys and types too, :mod:`tsctl.config.blocks`);
- an override the command would ignore: :mod:`tsctl.config.overrides`;
- a name no registry holds, a value outside a fixed set of a higher layer: :mod:`tsctl.runconfig.names`;
- a number out of its range: :mod:`tsctl.config.checks` for the schema's keys (:mod:`tsctl.config.validate`), and
  a settings block's own ``__post_init__`` for its keys, beside the entry that reads them;
- what a chosen entry needs (its own ``check``, what it needs of another entry or of a package's logic):
  :mod:`tsctl.runconfig.needs`;
- a setting that cannot take effect: :mod:`tsctl.runconfig.idle`;
- a setting this machine cannot run: the engine's declared ``runs_here``, asked by the command before any run folder
  (:func:`tsctl.engines.factory.check_runs_here`).
"""

from __future__ import annotations

from omegaconf import DictConfig

from tsctl.config.compose import Composed, compose_node
from tsctl.config.knobs import seeded_count
from tsctl.config.schema import TsctlConfig
from tsctl.config.validate import validate
from tsctl.runconfig.idle import idle_settings
from tsctl.runconfig.names import check_names
from tsctl.runconfig.needs import check_needs
from tsctl.runconfig.registries import schema

__all__ = ["check", "checked", "compose_config", "idle_settings"]


def compose_config(overrides: list[str] | None = None, idle: bool = False, command: str | None = None) -> Composed:
    """Compose ``conf/config.yaml`` with ``overrides`` (Hydra syntax) onto the schema with every settings block, and
    check it (:func:`checked`; ``idle`` also refuses settings that cannot take effect, ``command`` overrides that
    command would ignore).

    Raises:
        ConfigError: unknown key, wrong type, unknown option or name, a value out of range, or an override ignored.
    """
    composed = compose_node(overrides, command, schema())
    return checked(composed.node, composed.cfg, idle)


def checked(node: DictConfig, cfg: TsctlConfig, idle: bool = False) -> Composed:
    """``cfg`` checked (:func:`check`), with the derived ``seeded_per_group`` (samples per group that continue a seed) set
    in it and in ``node``, which a run saves as its config."""
    cfg = check(cfg, idle)
    cfg.seeded_per_group = node.seeded_per_group = seeded_count(cfg)
    return Composed(node=node, cfg=cfg)


def check(cfg: TsctlConfig, idle: bool = False) -> TsctlConfig:
    """Check the names of ``cfg``, then its ranges, then what its entries need, then (with ``idle``, as a command's own
    config is; a sweep's points are checked together instead, by :func:`tsctl.stages.ablate.plan.plan`) that no setting
    is one that cannot take effect; return ``cfg`` unchanged or raise :class:`ConfigError`."""
    check_names(cfg)
    validate(cfg)
    check_needs(cfg)
    if idle and (errors := idle_settings(cfg)):
        raise errors[0]
    return cfg
