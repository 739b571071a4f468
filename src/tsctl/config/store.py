"""Registers the structured schema with Hydra's ConfigStore and locates the ``conf/`` folder."""

from __future__ import annotations

from pathlib import Path

from tsctl.config.schema import TsctlConfig

SCHEMA_NAME = "tsctl_schema"

_registered: list[type] = [TsctlConfig]
"""The schema last registered: :class:`TsctlConfig`, or the one with the registries' settings blocks (:mod:`tsctl.config.blocks`)."""


def register_schema(schema: type = TsctlConfig) -> None:
    """Make ``tsctl_schema`` (``schema``: :class:`TsctlConfig` or a subclass with settings blocks) available to the defaults
    list of ``conf/config.yaml``."""
    from hydra.core.config_store import ConfigStore  # only the commands need Hydra; conf_dir() does not

    ConfigStore.instance().store(name=SCHEMA_NAME, node=schema)
    _registered[0] = schema


def registered_schema() -> type:
    """The schema the last composition used (its defaults are what a saved config that lacks a key ran with)."""
    return _registered[0]


def conf_dir() -> Path:
    """The ``conf/`` folder: the checkout's own when run from source, else the packaged copy."""
    package = Path(__file__).resolve().parents[1]
    source_checkout = package.parents[1] / "conf"
    if (source_checkout / "config.yaml").is_file():
        return source_checkout
    return package / "conf"
