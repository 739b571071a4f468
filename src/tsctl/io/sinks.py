"""Metric sinks: ``metrics.jsonl`` in the run folder (always) and wandb (``logger=wandb``).

What wandb would refuse is found before any run folder exists (:func:`check_logger`): a ``WANDB_*``
environment variable of a value wandb's settings refuse, and the online mode without a login. A wandb
that still cannot start (its server unreachable) is one line too (:class:`LoggerError`).
"""

from __future__ import annotations

import netrc
import os
from typing import Any
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf

from tsctl.config.errors import EnvSettingError
from tsctl.config.schema import LoggerConfig
from tsctl.io.runs import RunDir


class LoggerError(RuntimeError):
    """The metric logger (wandb) cannot start; the message names the cause and the fix."""


def wandb_mode(cfg: LoggerConfig) -> str:
    """The mode wandb runs in: ``WANDB_MODE`` where the environment sets it (it overrides ``logger.wandb_mode``), else that key."""
    return os.environ.get("WANDB_MODE", cfg.wandb_mode)


def check_logger(cfg: LoggerConfig) -> None:
    """Refuse, before any run folder, what would stop wandb from starting (see the module docstring).

    Raises:
        EnvSettingError: a ``WANDB_*`` variable holds a value wandb's settings refuse.
        LoggerError: the online mode without a W&B login (no ``WANDB_API_KEY``, no ``.netrc`` entry for its host).
    """
    if cfg.name != "wandb":
        return
    import pydantic
    import wandb

    try:
        wandb.Settings().update_from_env_vars(dict(os.environ))
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        value = str(first.get("input"))
        name = next((k for k, v in sorted(os.environ.items()) if k.startswith("WANDB_") and v == value), f"WANDB_{str(first['loc'][0]).upper()}")
        raise EnvSettingError(name, value, f"wandb refuses it ({first['msg']}); fix it or unset it") from None
    if wandb_mode(cfg) != "online" or os.environ.get("WANDB_API_KEY"):
        return
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        login = netrc.netrc(os.environ.get("NETRC")).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        login = None
    if login is None:
        offline = "set WANDB_MODE=offline" if "WANDB_MODE" in os.environ else "use logger.wandb_mode=offline"
        raise LoggerError(f"logger=wandb logs online, but there is no W&B login here (no WANDB_API_KEY, no entry for {host} in ~/.netrc); "
                          f"run `wandb login` (or set WANDB_API_KEY), or {offline} and `wandb sync` the run later")


class MetricsSink:
    """Writes each step's record to ``metrics.jsonl`` and, when configured, to wandb.

    Raises:
        LoggerError: wandb does not start.
    """

    def __init__(self, run: RunDir, cfg: LoggerConfig, node: DictConfig) -> None:
        self.run = run
        self.wandb = None
        if cfg.name == "wandb":
            import wandb

            try:
                self.wandb = wandb.init(
                    project=cfg.wandb_project,
                    name=f"{run.path.parent.name}/{run.path.name}",
                    id=f"{run.path.parent.name}-{run.path.name}",
                    dir=str(run.path),
                    config=OmegaConf.to_container(node, resolve=True),
                    mode=wandb_mode(cfg),
                    resume="allow",
                )
            except Exception as err:  # noqa: BLE001 - wandb raises its own types (and pydantic's, and OSError) for a failed start
                words = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise LoggerError(f"logger=wandb could not start ({type(err).__name__}: {words}); check the W&B settings "
                                  "(logger.wandb_*, WANDB_* in the environment, the network), or use logger=console") from None

    def log(self, record: dict[str, Any]) -> None:
        """Append ``record`` (which carries its ``step``)."""
        self.run.append_metrics(record)
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in record.items() if k != "step"}, step=int(record["step"]))

    def close(self) -> None:
        """Flush and close wandb."""
        if self.wandb is not None:
            self.wandb.finish()
