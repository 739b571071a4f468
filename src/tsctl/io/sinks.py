"""Metric sinks: ``metrics.jsonl`` in the run folder (always) and wandb (``logger=wandb``)."""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tsctl.config.schema import LoggerConfig
from tsctl.io.runs import RunDir


class MetricsSink:
    """Writes each step's record to ``metrics.jsonl`` and, when configured, to wandb."""

    def __init__(self, run: RunDir, cfg: LoggerConfig, node: DictConfig) -> None:
        self.run = run
        self.wandb = None
        if cfg.name == "wandb":
            import wandb

            self.wandb = wandb.init(
                project=cfg.wandb_project,
                name=f"{run.path.parent.name}/{run.path.name}",
                id=f"{run.path.parent.name}-{run.path.name}",
                dir=str(run.path),
                config=OmegaConf.to_container(node, resolve=True),
                mode=os.environ.get("WANDB_MODE", cfg.wandb_mode),
                resume="allow",
            )

    def log(self, record: dict[str, Any]) -> None:
        """Append ``record`` (which carries its ``step``)."""
        self.run.append_metrics(record)
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in record.items() if k != "step"}, step=int(record["step"]))

    def close(self) -> None:
        """Flush and close wandb."""
        if self.wandb is not None:
            self.wandb.finish()
