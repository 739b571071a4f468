"""Who writes a refresh window's seeds: the live policy, a snapshot from the pool, or an outside source.

:class:`WindowWriter` is what :class:`tsctl.seeds.bank.SeedBank` calls when a window's shard must be
written, and what it tells about each step's advantages.

- ``seeds.source=self`` with ``seeds.selector=latest`` (the default): the current weights write
  every seed, exactly as without a pool (no snapshot is saved).
- ``seeds.source=self`` with a selector that declares ``pool``: the current weights join the pool
  (:mod:`tsctl.seeds.pool`), the selector (:mod:`tsctl.seeds.selectors`) picks an arm per prompt
  of the window, and each chosen snapshot writes its prompts' seeds in one batch: arm 0 with the
  live model and engine (the same draws as ``latest`` would make for those prompts), older arms
  from their folder with an ``hf`` engine of their own, or, where the live engine serves adapters (``vllm`` with
  ``model.lora``), through it with the snapshot's adapter, pi_b from the trainer's model with that adapter lent. The randomness of a window's choice is a
  pure function of ``(seed, window)``; a selector declaring ``arm_log`` (the bandit) keeps its arms'
  rewards in ``seeds/pool/arms.jsonl`` (:mod:`tsctl.seeds.arm_log`), so a resumed run makes the same
  choices; one declaring ``probes`` gets each snapshot's probe surprisal.
- ``seeds.source=model`` or ``traces``: :mod:`tsctl.seeds.sources`.

With ``truncation=target_pass`` the seed controller (:mod:`tsctl.seeds.controller`) then places each prompt's
seeds among its graded behaviour responses, from what it measured of earlier steps (``seeds/controller.jsonl``),
and rank 0 writes every seed of a window.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from tsctl.config.knobs import window_length
from tsctl.config.rng import Stream, step_seed
from tsctl.config.schema import TsctlConfig
from tsctl.distributed.world import current
from tsctl.engines.base import AdapterEngine, Engine
from tsctl.engines.factory import build_engine, in_process
from tsctl.io.progress import console
from tsctl.io.runs import RunError
from tsctl.models.loading import load_model
from tsctl.models.lora import swapped_adapter
from tsctl.models.precision import compute_dtype
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import Sample
from tsctl.seeds.arm_log import ArmLog
from tsctl.seeds.attribution import arm_rewards, attribution_metrics
from tsctl.seeds.base import arm_of
from tsctl.seeds.controller import Controller, controller_metrics
from tsctl.seeds.generate import seed_columns
from tsctl.seeds.pool import SNAPSHOT_FILE, BehaviourPool, Snapshot, probe_problems, probe_surprisal
from tsctl.seeds.selectors import SELECTORS, ArmStats, select
from tsctl.seeds.sources import SOURCES, TraceSource, external_source
from tsctl.seeds.truncation import STRATEGIES
from tsctl.tasks.base import Problem, Task


class WindowWriter:
    """Writes the seed columns of each refresh window from the configured behaviour source."""

    def __init__(self, folder: Path, cfg: TsctlConfig, formatter: PromptFormatter, task: Task, problems: Sequence[Problem]) -> None:
        s, needs = cfg.seeds, SELECTORS.needs(cfg.seeds.selector)
        self.cfg, self.formatter, self.task = cfg, formatter, task
        self.pool = BehaviourPool(folder / "pool", s.pool_size) if SOURCES.needs(s.source).own and needs.pool else None
        self.log = ArmLog(folder / "pool" / "arms.jsonl") if self.pool is not None and needs.arm_log else None
        self.probes = probe_problems(problems, s.probe_prompts, cfg.seed) if self.pool is not None and needs.probes else None
        self.external = external_source(cfg, formatter, task)
        note = self.external.coverage(problems) if isinstance(self.external, TraceSource) else None
        if note is not None and current().main:
            console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
        self.controller = Controller(folder / "controller.jsonl", cfg) if STRATEGIES.needs(cfg.truncation).controller else None
        self.splits = self.external is None and self.pool is None and self.controller is None
        """Whether a window's prompts may be split among ranks (the live weights write every seed, the controller places none)."""

    def resume(self, step: int) -> None:
        """The run (re)starts at ``step``: forget the bandit rewards and the controller's measures of later steps, which are redone."""
        if self.log is not None and current().main:
            self.log.truncate(step)
        if self.controller is not None and current().main:
            self.controller.truncate(step)

    def columns(
        self, first: int, problems: Sequence[Problem], serve_steps: Sequence[int], k: int, sample_seed: int, model: PreTrainedModel, engine: Engine
    ) -> dict[str, list]:
        """Seed-shard columns of the window opening at ``first``: ``k`` rows per problem, in order, placed by the
        seed controller when there is one."""
        written = self._columns(first, problems, serve_steps, k, sample_seed, model, engine)
        return self.controller.place(written, first, k) if self.controller is not None else written

    def _columns(
        self, first: int, problems: Sequence[Problem], serve_steps: Sequence[int], k: int, sample_seed: int, model: PreTrainedModel, engine: Engine
    ) -> dict[str, list]:
        if self.external is not None:
            return self.external.columns(problems, k, first, serve_steps, sample_seed)
        if self.pool is None:
            return self._write(model, engine, Snapshot(first, Path()), problems, serve_steps, k, sample_seed)
        if not (self.pool.path(first) / SNAPSHOT_FILE).is_file():
            surprisal = probe_surprisal(engine, self.formatter, self.probes, self.cfg) if self.probes else None
            self.pool.add(first, model, self.formatter.tokenizer, surprisal)
        arms = self.pool.arms(first)
        choice = select(self.cfg.seeds.selector, self.stats(first, arms), len(problems), np.random.default_rng([self.cfg.seed, first, int(Stream.SELECTOR)]), self.cfg.seeds)
        parts: dict[int, dict[str, list]] = {}
        for arm in sorted(set(choice)):
            chosen = [i for i, a in enumerate(choice) if a == arm]
            snap, subset, steps = arms[arm], [problems[i] for i in chosen], [serve_steps[i] for i in chosen]
            if snap.step == first:
                parts[arm] = self._write(model, engine, snap, subset, steps, k, sample_seed)
            else:
                seed = step_seed(self.cfg.seed, first, Stream.ARM + self.age(snap, first))
                parts[arm] = self._write_snapshot(snap, subset, steps, k, seed, model, engine)
        return _interleave(parts, choice, k)

    def observe(self, step: int, samples: Sequence[Sample], advantages: torch.Tensor) -> dict[str, float]:
        """Step ``step``'s (0-based) attribution metrics; the bandit also records what each arm earned."""
        if self.log is not None and current().main:  # under torchrun every rank observes the gathered samples
            self.log.append(step + 1, arm_rewards(samples, advantages, step, window_length(self.cfg)))
        if self.controller is None:
            return attribution_metrics(samples, advantages, step, window_length(self.cfg))
        if current().main:
            self.controller.observe(step + 1, samples)
        return attribution_metrics(samples, advantages, step, window_length(self.cfg)) | controller_metrics(samples)

    def age(self, snap: Snapshot, first: int) -> int:
        """The arm of ``snap`` in the window opening at ``first``: its age in refresh windows."""
        return arm_of(snap.step, first, window_length(self.cfg))

    def stats(self, first: int, arms: Sequence[Snapshot]) -> ArmStats:
        """What the selector sees: the arms newest first, their probe surprisal and bandit rewards."""
        totals = self.log.totals() if self.log is not None else {}
        pulls = [totals.get(self.age(s, first), (0, 0.0)) for s in arms]
        surprisal = [s.surprisal for s in arms] if self.probes else None
        if surprisal is not None and None in surprisal:
            raise RunError(f"{self.pool.folder}: a snapshot has no probe surprisal; delete the pool folder and resume from a checkpoint before it")
        return ArmStats(steps=[s.step for s in arms], surprisal=surprisal, pulls=[n for n, _ in pulls], rewards=[r for _, r in pulls])

    def _write(self, model: PreTrainedModel, engine: Engine, snap: Snapshot, problems: Sequence[Problem], steps: Sequence[int], k: int, sample_seed: int) -> dict[str, list]:
        return seed_columns(
            model, engine, self.formatter, self.task, problems, k, self.cfg,
            checkpoint=f"step-{snap.step}", checkpoint_step=snap.step, sample_seed=sample_seed, serve_steps=steps,
        )

    def _write_snapshot(
        self, snap: Snapshot, problems: Sequence[Problem], steps: Sequence[int], k: int, sample_seed: int, live: PreTrainedModel, engine: Engine
    ) -> dict[str, list]:
        """Seeds written by an older snapshot: sampled through the live ``engine`` with the snapshot's adapter where it
        serves adapters, pi_b from the live model with that adapter lent (:func:`~tsctl.models.lora.swapped_adapter`);
        else loaded from its folder with an in-process (``hf``) engine of its own."""
        if isinstance(engine, AdapterEngine) and engine.serves_adapters:
            with swapped_adapter(live, snap.path):
                return self._write(live, engine.with_adapter(snap.path), snap, problems, steps, k, sample_seed)
        model = load_model(snap.path, self.cfg.model.dtype, self.cfg.model.device)[0].eval()
        engine = build_engine(
            in_process(self.cfg.engine), model, self.formatter.end_ids, self.formatter.pad_id, str(snap.path),
            seed=self.cfg.seed, compute_dtype=compute_dtype(self.cfg, model),
        )
        return self._write(model, engine, snap, problems, steps, k, sample_seed)


def _interleave(parts: dict[int, dict[str, list]], choice: Sequence[int], k: int) -> dict[str, list]:
    """Columns in prompt order from each arm's columns (``k`` rows per prompt, prompts in order within an arm)."""
    taken = {arm: 0 for arm in parts}
    order: list[tuple[int, int]] = []
    for arm in choice:
        order.extend((arm, taken[arm] * k + j) for j in range(k))
        taken[arm] += 1
    names = next(iter(parts.values())).keys()
    return {name: [parts[arm][name][row] for arm, row in order] for name in names}
