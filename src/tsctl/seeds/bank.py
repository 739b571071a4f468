"""Seeds inside ``tsctl train``: one shard per refresh window, written when the window opens.

At step ``w`` (a multiple of ``refresh``; only step 0 when ``refresh=0``) the current weights are
pi_b: they write ``round(n * ratio / 100)`` responses for every prompt of steps ``w .. w+T-1``
into ``seeds/step-<w>.parquet``, so only one model is ever in memory. Rows are ordered by
(step, prompt, slot); a resumed run reads the shard back instead of regenerating it. Another
selector (``seeds.selector``) may give a prompt's seeds to an older snapshot of the behaviour pool,
``seeds.source`` to another model or a trace file (:mod:`tsctl.seeds.behaviour`).

Recovery: a shard that is missing, truncated, corrupted, without its ``.sha256`` (a process
killed between the two writes) or whose rows do not fit the run (:mod:`tsctl.io.shard_contents`: token ids,
lengths, cuts, log-probs, seeds per prompt) is written again from the weights that wrote it, with the same
sampling seed, so the seeds are the same as the lost ones: the current weights when the window
opens now, else checkpoint ``step-<w>`` (the base model for ``w = 0``). ``tsctl train`` writes a
checkpoint at every window's first step and keeps it from ``trainer.keep_checkpoints``'s pruning
until the window closes (:meth:`SeedBank.keep`), so a resume inside an open window can always do
this; when that checkpoint is gone anyway, the error says what to do.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Sequence

import torch
from rich.markup import escape
from transformers import PreTrainedModel

from tsctl.config.knobs import seeded_count, window_length
from tsctl.config.rng import Stream, rank_seed, step_seed
from tsctl.config.schema import TsctlConfig
from tsctl.distributed.world import all_gather_objects, barrier, current
from tsctl.engines.base import Engine
from tsctl.io.adapters import has_adapter
from tsctl.io.checkpoints import checkpoint_path, list_checkpoints, rng_state, set_rng_state
from tsctl.io.progress import console
from tsctl.io.shard_contents import RowLimits, read_checked
from tsctl.io.shards import ShardError, checksum_path, write_shard
from tsctl.models.loading import load_model
from tsctl.models.lora import swapped_adapter
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import Sample
from tsctl.seeds.base import Seed, seeds_from_table, window
from tsctl.seeds.behaviour import WindowWriter
from tsctl.seeds.shard_limits import row_limits
from tsctl.tasks.base import Problem, Task
from tsctl.tasks.schedule import step_prompts


class SeedBank:
    """Behaviour-policy seeds for the steps of one run.

    Args:
        folder: the run's ``seeds/`` folder.
        cfg, formatter, task, problems: the run's config, prompt formatter, task and train split.
        checkpoints: the run's ``checkpoints/`` folder (where a window's behaviour weights are kept).
        base: the model the run started from (the behaviour policy of window 0).
    """

    def __init__(self, folder: Path, cfg: TsctlConfig, formatter: PromptFormatter, task: Task, problems: Sequence[Problem], checkpoints: Path, base: str) -> None:
        self.folder, self.cfg, self.formatter, self.task, self.problems = folder, cfg, formatter, task, problems
        self.checkpoints, self.base = checkpoints, base
        self.k = seeded_count(cfg)
        self.start = -1
        self.rows: list[Seed] = []
        self.ids: list[str] = []
        self.writer = WindowWriter(folder, cfg, formatter, task, problems)
        self.opened_at: int | None = None

    def window(self, step: int) -> tuple[int, int]:
        """First and one-past-last step served by the shard that covers ``step``."""
        return window(step, window_length(self.cfg), self.cfg.trainer.steps)

    def path(self, first: int) -> Path:
        return self.folder / f"step-{first:06d}.parquet"

    def opens_window(self, step: int) -> bool:
        """Whether a later window starts at ``step`` (its behaviour weights must then be checkpointed)."""
        return 0 < step < self.cfg.trainer.steps and self.window(step)[0] == step

    def keep(self, next_step: int) -> set[int]:
        """Checkpoint steps to spare from pruning before ``next_step`` runs: its window's first step while it is open."""
        if next_step >= self.cfg.trainer.steps:
            return set()
        first = self.window(next_step)[0]
        return {first} if first > 0 else set()

    def check_resume(self, step: int, model: PreTrainedModel, engine: Engine) -> None:
        """Before a resume at ``step`` touches anything: raise ShardError if its window's shard is unusable (for ``model``
        and ``engine``) and cannot be written again."""
        first, last = self.window(step)
        if step == first or first == 0 or any(s == first for s, _ in list_checkpoints(self.checkpoints)):
            return
        try:
            read_checked(self.path(first), "seed", self.limits(first, last, model, engine))
        except ShardError as damage:
            raise ShardError(self._lost(self.path(first), first, last, damage)) from None

    def limits(self, first: int, last: int, model: PreTrainedModel, engine: Engine) -> RowLimits:
        """What the rows of window ``first..last-1``'s shard must fit: ``model``'s vocabulary, ``engine``'s context,
        ``k`` seeds for each of the window's prompts."""
        return row_limits(model, engine, self.k, (last - first) * self.cfg.trainer.batch_size)

    def prepare(self, step: int, model: PreTrainedModel, engine: Engine) -> None:
        """Make the seeds of ``step`` available: read its window's shard, or write it (again) from the weights that own it."""
        if self.opened_at is None:
            self.opened_at = step
            self.writer.resume(step)
        first, last = self.window(step)
        if first == self.start:
            return
        path = self.path(first)
        limits = self.limits(first, last, model, engine)
        try:
            table = read_checked(path, "seed", limits).table.to_pydict()
        except ShardError as damage:
            self._rewrite(step, first, last, model, engine, damage)
            table = read_checked(path, "seed", limits).table.to_pydict()
        self.rows = seeds_from_table(table)
        self.ids = table["prompt_id"]
        self.start = first

    def _rewrite(self, step: int, first: int, last: int, model: PreTrainedModel, engine: Engine, damage: ShardError) -> None:
        """Write the shard of window ``first`` (missing or damaged) from its behaviour weights."""
        path = self.path(first)
        if path.exists() or checksum_path(path).exists():
            why = _problem(path, damage)
            console.print(f"[yellow]note:[/yellow] seed shard {path}: {escape(why)}; writing the seeds of steps {first}..{last - 1} again", highlight=False, soft_wrap=True)
        if step == first:
            self._write(first, last, model, engine)
            return
        source = self.base if first == 0 else checkpoint_path(self.checkpoints, first)
        if first > 0 and not any(s == first for s, _ in list_checkpoints(self.checkpoints)):
            raise ShardError(self._lost(path, first, last, damage))
        with _weights_of(str(source), model, engine, self.cfg):
            self._write(first, last, model, engine)

    def _write(self, first: int, last: int, model: PreTrainedModel, engine: Engine) -> None:
        """Generate and write the shard of window ``first..last-1`` with the weights ``model`` and ``engine`` hold now.

        Under ``torchrun`` every rank calls it: with the default behaviour source (the live weights,
        ``seeds.selector=latest``) each rank writes the seeds of its block of the window's prompts with
        its own stream (:func:`~tsctl.config.rng.rank_seed`); otherwise (a pool, another model, traces)
        rank 0 writes them all. Rank 0 writes the shard, and every rank returns once it is on disk.
        """
        world = current()
        bs = self.cfg.trainer.batch_size
        indices = [i for s in range(first, last) for i in step_prompts(self.cfg.seed, s, bs, len(self.problems))]
        serve_steps = [s for s in range(first, last) for _ in range(bs)]
        sample_seed = step_seed(self.cfg.seed, first, Stream.SEED_SAMPLING)
        columns = None
        if self.writer.splits:
            block = world.block(len(indices))
            mine = self.writer.columns(
                first, [self.problems[i] for i in indices[block.start : block.stop]], serve_steps[block.start : block.stop],
                self.k, rank_seed(sample_seed, world.rank), model, engine,
            )
            parts = all_gather_objects(mine)
            columns = {name: [row for part in parts for row in part[name]] for name in mine}
        elif world.main:
            columns = self.writer.columns(first, [self.problems[i] for i in indices], serve_steps, self.k, sample_seed, model, engine)
        if world.main:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_shard(self.path(first), "seed", columns, {"first_step": str(first), "last_step": str(last)}, overwrite=True)
        barrier()

    def _lost(self, path: Path, first: int, last: int, damage: ShardError | None = None) -> str:
        """The error when window ``first``'s shard is unusable (``damage``: why) and checkpoint ``step-<first>`` is gone: what to do."""
        found = [s for s, _ in list_checkpoints(self.checkpoints)]
        older = [s for s in found if s < first]
        if older:
            newer = ", ".join(f"step-{s}" for s in found if s > older[-1])
            fix = f"to redo the run from step {older[-1]}, delete checkpoints {newer} in {self.checkpoints} and resume again"
        else:
            fix = f"start the run anew: delete {self.folder.parent} or pass another name=..."
        why = f" ({_problem(path, damage)})" if damage is not None and path.exists() else ""
        return (
            f"{path}: the seed shard of steps {first}..{last - 1} is missing or damaged{why} and checkpoint step-{first}, "
            f"the behaviour policy that wrote it, is gone, so it cannot be written again; {fix}"
        )

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

    def observe(self, step: int, samples: Sequence[Sample], advantages: torch.Tensor) -> dict[str, float]:
        """Attribution metrics of step ``step``'s seeded samples (``seeds/by_*``); the bandit learns from them."""
        return self.writer.observe(step, samples, advantages)


def _problem(path: Path, damage: ShardError) -> str:
    """What ``damage`` found wrong with the shard ``path``, without the file's name and the reader's fix for `tsctl seed`."""
    return str(damage).removeprefix(f"{path}: ").split("; ")[0]


@contextlib.contextmanager
def _weights_of(source: str, model: PreTrainedModel, engine: Engine, cfg: TsctlConfig) -> Iterator[None]:
    """Give ``model`` and ``engine`` the weights saved at ``source`` for the block, then the current ones back, bit for bit.

    The global RNG states are restored too, so the resumed run goes on as if nothing had been generated. A policy
    carrying an adapter (``model.lora``) swaps its adapter only: ``source`` is then an adapter folder.
    """
    rng = rng_state()
    swap = swapped_adapter(model, source) if has_adapter(model) else _whole_weights(source, model, cfg)
    try:
        with swap:
            engine.load_weights(model.state_dict())
            yield
    finally:
        engine.load_weights(model.state_dict())
        set_rng_state(rng)


@contextlib.contextmanager
def _whole_weights(source: str, model: PreTrainedModel, cfg: TsctlConfig) -> Iterator[None]:
    """Run the block with the model folder ``source``'s weights in ``model``, then its own back."""
    own = {k: v.detach().clone() for k, v in model.state_dict().items()}
    behaviour = load_model(source, cfg.model.dtype, cfg.model.device)[0]
    with torch.no_grad():
        model.load_state_dict(behaviour.state_dict())
    del behaviour
    try:
        yield
    finally:
        with torch.no_grad():
            model.load_state_dict(own)
