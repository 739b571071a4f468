"""One RL step, and what a run needs to take it: the trainer's side of ``tsctl train``.

:func:`setup` builds a run's :class:`~tsctl.trainer.context.StepContext`: the sampler (engine, formatter,
task, train split), the :class:`~tsctl.trainer.learner.Learner` (policy, optimiser, KL reference,
non-finite guard) and the seed bank; :func:`run_step` is one step of the loop: the step's seeds (written
at a refresh), then :func:`train_step`, which reads sample -> advantages -> score -> update -> sync: the
rollout, the advantages, the learner's :meth:`~tsctl.trainer.learner.Learner.score` of the batch (pi_old,
the ratio denominators, the reference's log-probs, the loss mask), its
:meth:`~tsctl.trainer.learner.Learner.update` and the engine's weight sync. Whoever runs the loop keeps
the run folder, its lock, the metric sinks, the signals, the held-out evaluation and the checkpoints.

Each phase's wall time is taken by :func:`timed` into the record's ``time/*`` keys: ``time/step`` is
the whole step, the seeds written at a refresh included (``time/seeds``).

Nothing here needs Hydra or OmegaConf: ``bench/gpu_check.py`` drives :func:`run_step` on images
without them.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

import torch

from tsctl.config.knobs import uses_seeds
from tsctl.config.schema import TsctlConfig
from tsctl.distributed import world as ranks
from tsctl.engines.factory import build_engine, logs_dir
from tsctl.io import faults
from tsctl.models.batch import collate
from tsctl.models.compiled import CompileStats, compile_stats
from tsctl.models.precision import compute_dtype
from tsctl.models.prompts import PromptFormatter
from tsctl.seeds.bank import SeedBank
from tsctl.tasks.registry import build_task
from tsctl.tasks.split_checks import check_task
from tsctl.trainer.context import StepContext
from tsctl.trainer.demand import train_demand
from tsctl.trainer.learner import Learner, parallel_policy
from tsctl.trainer.rewards import sample_advantages
from tsctl.trainer.rollout import Sampler, sample_groups, servable_task
from tsctl.trainer.rollout_shard import write_step_rollouts
from tsctl.trainer.step_metrics import rollout_metrics

if TYPE_CHECKING:
    from tsctl.io.runs import RunDir


@contextmanager
def timed(timings: dict[str, float], key: str) -> Iterator[None]:
    """Time the ``with`` block: its wall seconds go to ``timings[key]`` when it ends."""
    start = time.perf_counter()
    yield
    timings[key] = time.perf_counter() - start


def setup(cfg: TsctlConfig, path: str, base: str, located: RunDir, world: ranks.World = ranks.SINGLE) -> StepContext:
    """The run's step context: the policy from ``path`` (the base model ``base`` or a checkpoint to resume; sharded over
    ``world`` under ``torchrun``), its engine, the task's train split, the learner (its KL reference from ``base``) and,
    in a Thinking Seeds run, the seed bank of the run folder ``located``."""
    parallel, tokenizer = parallel_policy(cfg, path, base, world)
    formatter = PromptFormatter(tokenizer, cfg.model.use_chat_template, parallel.model.generation_config)
    drawn = build_task(cfg.task)
    check_task(drawn, cfg, scored=cfg.trainer.eval_problems if cfg.trainer.eval_every else 0)
    engine = build_engine(
        cfg.engine, parallel.inference, formatter.end_ids, formatter.pad_id, path, seed=cfg.seed, compute_dtype=compute_dtype(cfg, parallel.model),
        demand=lambda: train_demand(cfg, drawn, formatter, world), log_dir=logs_dir(cfg),
    )
    task = servable_task(cfg, formatter, engine, drawn)
    problems = task.problems("train")
    task.problems("heldout")  # checked now, not at the first evaluation
    learner = Learner(cfg, parallel, tokenizer, engine, base)  # after the engine: a reference on the GPU is not its memory
    seeds = SeedBank(located.path / "seeds", cfg, formatter, task, problems, located.checkpoints, base) if uses_seeds(cfg) else None
    return StepContext(cfg, Sampler(engine, formatter, task, problems=problems), learner, seeds)


def run_step(step: int, ctx: StepContext) -> dict[str, float]:
    """Step ``step`` (from 0) of the run ``ctx``: its seeds prepared, then :func:`train_step`.

    Returns :func:`train_step`'s record with ``time/seeds`` (seed generation at a refresh step counts
    toward the step that triggered it, ``time/step`` included) and ``torch_threads``.
    """
    timings: dict[str, float] = {}
    with timed(timings, "time/seeds"):
        if ctx.seeds is not None:
            ctx.seeds.prepare(step, ctx.learner.parallel.inference, ctx.sampler.engine)
    record = train_step(step, ctx)
    record["time/seeds"] = timings["time/seeds"]
    record["time/step"] += timings["time/seeds"]
    record["torch_threads"] = torch.get_num_threads()
    return record


def train_step(step: int, ctx: StepContext) -> dict[str, float]:
    """One step of the run ``ctx``: sample -> advantages -> score -> update -> sync; returns its metrics record.

    ``step`` counts from 0 (the record's ``step`` from 1). With ``ctx.rollouts_dir`` the step's samples
    are also written there; a non-finite loss, gradient or parameter raises :class:`~tsctl.trainer.nonfinite.NonFiniteError`.
    Under ``torchrun`` every rank returns the same record (of the global batch).
    """
    cfg, sampler, learner = ctx.cfg, ctx.sampler, ctx.learner
    engine = sampler.engine
    timings: dict[str, float] = {}
    with timed(timings, "time/step"):
        with timed(timings, "time/generate"):
            samples = sample_groups(step, cfg, sampler, ctx.seeds, learner.parallel)
        faults.hit("step-sampled")

        advantages = sample_advantages(samples, cfg)
        attribution = ctx.seeds.observe(step, samples, advantages) if ctx.seeds is not None else {}
        batch = collate(samples, advantages, sampler.formatter.pad_id, learner.device)
        if ctx.rollouts_dir is not None and learner.parallel.world.main:
            write_step_rollouts(ctx.rollouts_dir, step, samples, advantages)

        engine.sleep()  # rollouts are done: an engine with its own GPU memory frees it for the update
        with timed(timings, "time/old_logprobs"):
            gap = learner.score(batch)

        compiled_before = compile_stats() if learner.compiled is not None else None
        with timed(timings, "time/update"):
            update = learner.update(batch, step)
        with timed(timings, "time/weight_sync"):
            learner.sync(engine)
            engine.wake_up()
    generated = sum(len(s.generated_ids) for s in samples)
    trained = int(batch.attention_mask.sum()) * cfg.trainer.epochs
    return {
        "step": step + 1,
        **rollout_metrics(samples, batch, batch.old_entropy, list(cfg.trainer.position_bins), step),
        **attribution,
        **gap,
        **update.means(),
        **timings,
        "lr": learner.scheduler.get_last_lr()[0],
        "samples": len(samples),
        "generate_tokens_per_s": generated / max(timings["time/generate"], 1e-9),
        "train_tokens_per_s": trained / max(timings["time/update"], 1e-9),
        **(_compile_metrics(compiled_before) if compiled_before is not None else {}),
    }


def _compile_metrics(before: CompileStats) -> dict[str, float]:
    """``time/compile``: the seconds of this step's update spent compiling (part of ``time/update``); ``compile/graphs``:
    the graphs compiled so far in this process (more than one after the first step: shapes the graph did not cover)."""
    now = compile_stats()
    return {"time/compile": now.seconds - before.seconds, "compile/graphs": now.graphs}
