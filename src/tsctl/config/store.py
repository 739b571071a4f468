"""Registers the structured schema with Hydra's ConfigStore and locates the ``conf/`` folder."""

from __future__ import annotations

from pathlib import Path

from tsctl.config.schema import TsctlConfig

SCHEMA_NAME = "tsctl_schema"


def register_schema() -> None:
    """Make ``tsctl_schema`` available to the defaults list of ``conf/config.yaml``."""
    from hydra.core.config_store import ConfigStore  # only the commands need Hydra; conf_dir() does not

    ConfigStore.instance().store(name=SCHEMA_NAME, node=TsctlConfig)


def conf_dir() -> Path:
    """The ``conf/`` folder: the checkout's own when run from source, else the packaged copy."""
    package = Path(__file__).resolve().parents[1]
    source_checkout = package.parents[1] / "conf"
    if (source_checkout / "config.yaml").is_file():
        return source_checkout
    return package / "conf"
