"""Compose a command's config from ``conf/`` plus command-line overrides (types and keys checked).

Ranges and registered names are checked above, by every command's composition step
(:func:`tsctl.runconfig.compose_config`).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from tsctl.config.errors import ConfigError
from tsctl.config.moved import MOVED_KEYS
from tsctl.config.overrides import check_overrides
from tsctl.config.schema import TsctlConfig
from tsctl.config.store import conf_dir, register_schema


@dataclass
class Composed:
    """A composed config: the raw node (for printing and saving) and the config object."""

    node: DictConfig
    cfg: TsctlConfig


def _explain(err: Exception) -> ConfigError:
    """Turn a Hydra/OmegaConf exception into one ConfigError naming the key and what is allowed."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    missing_option = re.search(r"Could not find '([^'/]+)/([^']+)'", text)
    if missing_option:
        group, option = missing_option.groups()
        options = sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))
        return ConfigError(group, f"unknown option {option!r}; choose one of {', '.join(options)}")
    key = getattr(err, "full_key", None) or "overrides"
    if str(key) in MOVED_KEYS:
        return ConfigError(str(key), f"unknown key: it is {MOVED_KEYS[str(key)]} now")
    if re.search(r"Key '[^']+' not in", first):
        return ConfigError(str(key), f"unknown key ({first}); see the valid keys with --cfg job")
    return ConfigError(str(key), first)


def compose_node(overrides: list[str] | None = None, command: str | None = None, schema: type = TsctlConfig) -> Composed:
    """Compose ``conf/config.yaml`` with ``overrides`` (Hydra syntax) onto ``schema`` (:class:`TsctlConfig` or a
    subclass holding settings blocks, :mod:`tsctl.config.blocks`); keys and types are checked, values not yet.
    With ``command`` (``train``, ``eval``, ...), overrides that command would ignore are refused first
    (:func:`tsctl.config.overrides.check_overrides`).

    Raises:
        ConfigError: unknown key, wrong type or unknown option, or an override the command would ignore.
    """
    if command is not None:
        check_overrides(list(overrides or []), command)
    register_schema(schema)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3", job_name="tsctl"):
            node = compose(config_name="config", overrides=list(overrides or []))
        obj = OmegaConf.to_object(node)
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        if isinstance(err, ConfigError):
            raise
        cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else err
        raise _explain(cause) from None
    finally:
        GlobalHydra.instance().clear()
    assert isinstance(obj, TsctlConfig)
    unknown = unknown_keys(node, schema)
    if unknown:
        raise ConfigError(unknown[0], "unknown key: tsctl has no such setting and would ignore it; drop it, or fix its spelling and drop the '+' (see the valid keys with --cfg job)")
    return Composed(node=node, cfg=obj)


def unknown_keys(node: DictConfig, schema: type, prefix: str = "") -> list[str]:
    """Dotted keys of ``node`` that the dataclass ``schema`` does not declare (Hydra's ``+key=value`` can add them)."""
    hints = typing.get_type_hints(schema)
    fields = {f.name for f in dataclasses.fields(schema)}
    out = []
    for key in node.keys():
        if key not in fields:
            out.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(hints[key]) and isinstance(node[key], DictConfig):
            out += unknown_keys(node[key], hints[key], f"{prefix}{key}.")
    return out
