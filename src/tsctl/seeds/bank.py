"""Seeds inside ``tsctl train``: one shard per refresh window, written when the window opens.

At step ``w`` (a multiple of ``refresh``; only step 0 when ``refresh=0``) the current weights are
pi_b: they write ``round(n * ratio / 100)`` responses for every prompt of steps ``w .. w+T-1``
into ``seeds/step-<w>.parquet``, so only one model is ever in memory. Rows are ordered by
(step, prompt, slot); a resumed run reads the shard back instead of regenerating it. Another
selector (``seeds.selector``) may give a prompt's seeds to an older snapshot of the behaviour pool,
``seeds.source`` to another model or a trace file (:mod:`tsctl.seeds.behaviour`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from transformers import PreTrainedModel

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import Engine
from tsctl.models.prompts import PromptFormatter
from tsctl.seeds.behaviour import WindowWriter
from tsctl.seeds.shards import ShardError, read_shard, write_shard
from tsctl.tasks.base import Problem, Task
from tsctl.trainer.rollout import Seed, seeded_count, seeds_from_table
from tsctl.trainer.samples import Sample
from tsctl.trainer.schedule import step_prompts, step_seed

SEED_SAMPLING = 4


class SeedBank:
    """Behaviour-policy seeds for the steps of one run."""

    def __init__(self, folder: Path, cfg: TsctlConfig, formatter: PromptFormatter, task: Task, problems: Sequence[Problem]) -> None:
        self.folder, self.cfg, self.formatter, self.task, self.problems = folder, cfg, formatter, task, problems
        self.k = seeded_count(cfg.trainer.n, cfg.ratio)
        self.start = -1
        self.rows: list[Seed] = []
        self.ids: list[str] = []
        self.writer = WindowWriter(folder, cfg, formatter, task, problems)
        self.opened_at: int | None = None

    def window(self, step: int) -> tuple[int, int]:
        """First and one-past-last step served by the shard that covers ``step``."""
        steps = self.cfg.trainer.steps
        if self.cfg.refresh == 0:
            return 0, steps
        first = step - step % self.cfg.refresh
        return first, min(first + self.cfg.refresh, steps)

    def path(self, first: int) -> Path:
        return self.folder / f"step-{first:06d}.parquet"

    def prepare(self, step: int, model: PreTrainedModel, engine: Engine) -> None:
        """Make the seeds of ``step`` available: read its window's shard, or write it at the window's first step."""
        if self.opened_at is None:
            self.opened_at = step
            self.writer.resume(step)
        first, last = self.window(step)
        if first == self.start or self.k == 0:
            return
        path = self.path(first)
        if not path.exists():
            if step != first:
                raise ShardError(f"{path}: the seed shard of steps {first}..{last - 1} is missing; resume from a checkpoint at or before step {first}")
            self.folder.mkdir(parents=True, exist_ok=True)
            bs = self.cfg.trainer.batch_size
            indices = [i for s in range(first, last) for i in step_prompts(self.cfg.seed, s, bs, len(self.problems))]
            serve_steps = [s for s in range(first, last) for _ in range(bs)]
            sample_seed = step_seed(self.cfg.seed, first, SEED_SAMPLING)
            columns = self.writer.columns(first, [self.problems[i] for i in indices], serve_steps, self.k, sample_seed, model, engine)
            write_shard(path, "seed", columns, {"first_step": str(first), "last_step": str(last)}, overwrite=False)
        table = read_shard(path, "seed").table.to_pydict()
        self.rows = seeds_from_table(table)
        self.ids = table["prompt_id"]
        self.start = first

    def for_step(self, step: int, indices: Sequence[int]) -> list[list[Seed]]:
        """The ``k`` seeds of each prompt of ``step`` (``indices`` into the train split, in order)."""
        offset = (step - self.start) * self.cfg.trainer.batch_size * self.k
        out = []
        for g, index in enumerate(indices):
            lo = offset + g * self.k
            if self.ids[lo] != self.problems[index].id:
                raise ShardError(f"{self.path(self.start)}: row {lo} is for prompt {self.ids[lo]}, expected {self.problems[index].id}; delete the shard to regenerate it")
            out.append([s for s in self.rows[lo : lo + self.k] if s.checkpoint])  # "": a prompt without a trace
        return out

    def for_extra(self, step: int, indices: Sequence[int]) -> list[list[Seed]]:
        """Dynamic sampling's refill prompts have no seeds: their samples are all plain."""
        return [[] for _ in indices]

    def observe(self, step: int, samples: Sequence[Sample], advantages: torch.Tensor) -> dict[str, float]:
        """Attribution metrics of step ``step``'s seeded samples (``seeds/by_*``); the bandit learns from them."""
        return self.writer.observe(step, samples, advantages)
