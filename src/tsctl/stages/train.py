"""The RL loop: DAPO/GRPO with Thinking Seeds.

What one step does, top to bottom:

1. **Prompts.** ``trainer.batch_size`` prompts from the train split, a pure function of
   ``(seed, step)`` (so a resumed run sees the same prompts).
2. **Seeds (Thinking Seeds, ``ratio > 0``).** Every ``refresh`` steps the current weights become
   the behaviour policy pi_b: they write full responses for the prompts of the next ``refresh``
   steps, a truncation strategy cuts each to a prefix, and the prefixes with their pi_b log-probs
   are stored as a seed shard in the run folder. ``refresh=0`` keeps the initial model as pi_b.
   Optional: a selector gives a prompt's seeds to an older snapshot of a behaviour pool
   (``seeds.selector``), or another model or a trace file writes them (``seeds.source``); the
   seeded samples' accuracy and advantage by source, arm, age and prefix length are logged.
3. **Rollout.** ``n`` responses per prompt from the rollout policy pi_old (the weights at the start
   of this step): ``round(n * ratio / 100)`` continue a seed prefix, the rest are plain.
4. **Rewards and advantages.** The task's verifier scores each whole response; advantages are
   group-normalised ``(r - mean) / (std + eps)`` over the prompt's samples (``algo.norm_adv_by_std``
   off: Dr. GRPO; ``seeds.adv_group=plain``: statistics over plain samples only). Optional DAPO
   overlong penalty or masking, and DAPO dynamic sampling (drop all-equal groups, draw more).
5. **Old log-probs.** pi_old's log-probs as the ``hf`` engine reported them while sampling, or
   one no-grad forward over the batch (``trainer.old_logprobs``, see :mod:`tsctl.trainer.pi_old`); the
   ratio of a prefix token is taken against its stored pi_b log-prob (its weight bounded by a dual
   clip, ``algo.prefix_clip_c``), of every other token against pi_old. When pi_old is recomputed,
   its gap to the engine's log-probs is logged (``logprob_gap/*``).
6. **Update.** ``mini_batches`` AdamW steps (times ``epochs``) on the clipped token-level objective,
   token-mean over each mini-batch (DAPO), micro-batched for memory without changing the gradient.
   Rows that share a prompt share one forward of it (``trainer.share_prompts``, same gradients).
   Parameters and AdamW stay float32; forwards compute in ``model.compute_dtype`` (bf16 on CUDA).
   An engine with its own copy of the weights (vLLM) sleeps through steps 5-6, then gets the new
   weights and wakes up.
7. **Log, evaluate, checkpoint.** Metrics (overall, by position, by token source) go to
   ``metrics.jsonl``; held-out accuracy every ``eval_every`` steps; a checkpoint every
   ``save_every`` steps, from which ``resume=true`` continues exactly. A NaN/Inf loss, gradient or
   parameter stops the run before its weights reach a checkpoint (``trainer.nonfinite``, see
   :mod:`tsctl.trainer.nonfinite`); SIGTERM or SIGINT stops it at the end of the step, with a
   checkpoint of it (:mod:`tsctl.trainer.stop_signals`).

Kept from DAPO: clip-higher, token-mean loss, dynamic sampling and overlong shaping (both off by
default), no KL term by default. Dropped: value model, reward model (rewards are rule-based).

Beyond one GPU: under ``torchrun --nproc_per_node=N`` the same loop runs on every rank, the policy
sharded with FSDP2; each rank samples its block of the step's groups, the global batch is gathered,
and the update equals one process's on that batch (:mod:`tsctl.trainer.parallel`); rank 0 writes
the run's files, checkpoints are torch.distributed.checkpoint shards plus the HF export
(:mod:`tsctl.io.sharded_checkpoints`). Without ``torchrun`` nothing of this exists.

Where each part lives: :func:`train` holds the run folder, its lock, the metric sinks and the
signals, and runs the step loop with held-out evaluation and checkpoints; the trainer
(:mod:`tsctl.trainer.step`) sets the run's :class:`~tsctl.trainer.context.StepContext` up (model,
engine, data, optimiser, seed bank) and takes each step, steps 1-6 above.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, TypeVar

import torch

from tsctl.distributed import world as ranks
from tsctl.engines.factory import unread_keys
from tsctl.evaluation.scoring import heldout_metrics
from tsctl.io import faults, rounding
from tsctl.io.progress import console, make_progress
from tsctl.io.resume_plan import plan_resume
from tsctl.io.runs import RunDir, locate_run, open_run
from tsctl.io.sinks import MetricsSink, check_logger
from tsctl.io.world_segments import with_segment, world_change
from tsctl.models.builtin import base_model_entry
from tsctl.models.loading import resolve_device
from tsctl.models.precision import require_fp32_master
from tsctl.seeds.base import seeded_count
from tsctl.stages.warmup import base_model_path
from tsctl.trainer.checkpointing import checkpoint, resume
from tsctl.trainer.no_answer import NoAnswerWatch
from tsctl.trainer.nonfinite import NonFiniteError
from tsctl.trainer.step import run_step, setup
from tsctl.trainer.stop_signals import Interrupted, StartSignals, StopSignals

if TYPE_CHECKING:
    from tsctl.config.compose import Composed

T = TypeVar("T")


def train(composed: Composed) -> RunDir:
    """Run (or resume) the RL loop described in the module docstring; returns the run folder.

    A new run's model, data and engine are loaded before its folder is created (a failed start leaves
    none); a resume takes the folder's lock first, then chooses its checkpoint. The folder is held
    locked until the run ends (see :func:`tsctl.io.runs.open_run`).
    Under ``torchrun`` every rank runs this; rank 0 alone creates, locks and writes the run folder.
    """
    require_fp32_master(composed.cfg.model.dtype)
    world = ranks.start(cuda=resolve_device(composed.cfg.model.device).type == "cuda")
    quiet = console.quiet
    console.quiet = quiet or not world.main
    try:
        with rounding.threads_kept():
            run = _train(composed, world)
    except BaseException as err:
        ranks.stop(clean=isinstance(err, Interrupted))  # an interrupted job's ranks all stopped after the same step
        raise
    finally:
        console.quiet = quiet
    ranks.stop()
    return run


def _train(composed: Composed, world: ranks.World) -> RunDir:
    cfg, tr = composed.cfg, composed.cfg.trainer
    unread = tuple(unread_keys(cfg.engine.name))  # another engine's settings: a resume may find them changed
    located = locate_run(cfg, composed.node, "train", unread)

    def claim() -> RunDir:
        return open_run(cfg, composed.node, "train", unread) if world.main else located

    check_logger(cfg.logger)  # what would stop wandb, before any run folder
    run: RunDir | None = None
    sink: MetricsSink | None = None
    try:
        with StartSignals():  # a signal ends the start as an error does: below, a new run leaves no folder
            # A resume holds the run's lock before it reads where to start: another process may be training it.
            run = _rank_0_first(claim) if cfg.resume else None
            plan = plan_resume(located.path, tr.eval_every > 0)
            faults.hit("resume-planned")
            device = resolve_device(cfg.model.device)
            recorded = located.manifest().get("arithmetic") if cfg.resume else None
            rounding.resume_as_started(recorded, device)  # even from step 0: the killed start's seed shard is reused
            base = _rank_0_first(lambda: base_model_path(cfg))  # the built-in model is warmed up once
            ctx, tokenizer = setup(cfg, str(plan.start[1] if plan.start else base), base, located, world)
            if ctx.seeds is not None and plan.start:
                ctx.seeds.check_resume(plan.start[0])
            if run is None:  # a new run's folder is made once its model and data have loaded
                run = _rank_0_first(claim)
                faults.hit("run-folder-made")
            start = 0
            if plan.start:
                start = plan.start[0]
                resume(ctx, plan.start[1])
            else:
                torch.manual_seed(cfg.seed)
            if world.main:
                kept = plan.apply()  # the step logs as the resume leaves them; damaged lines set aside
                if cfg.resume:
                    console.print(f"resume: {kept}", highlight=False, soft_wrap=True)
                started = {} if recorded else {"arithmetic": rounding.current(device)}  # a resumed run keeps what it started with
                before = run.manifest() if cfg.resume else {}
                if (note := world_change(before, start, world.size)) is not None:
                    console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
                sink = MetricsSink(run, cfg.logger, composed.node)
                run.mark_running(started_step=start, base_model=base_model_entry(cfg, base), **started, seeded=seeded_count(cfg),
                                 **with_segment(before, start, world.size))
    except BaseException:
        if sink is not None:
            sink.close()
        if run is not None:  # this start trained nothing: a resumed run's manifest stays as it was, a new run's folder goes
            run.close(discard=not cfg.resume)
        raise
    if ctx.seeds is not None and cfg.algo.dynamic_sampling:
        console.print(
            "[yellow]note:[/yellow] dynamic sampling's refill prompts get no seeds, so fewer than "
            f"ratio={cfg.ratio:g}% of the kept samples are seeded (the metrics' tokens_by_source show how many)",
            highlight=False,
        )
    ctx.rollouts_dir = run.path / "rollouts" if tr.save_rollouts else None
    try:
        with make_progress() as progress, StopSignals(tr.steps, tr.checkpoint_on_signal) as signals:
            if start == 0 and tr.eval_every:
                _log(sink, {"step": 0, **heldout_metrics(ctx.engine, ctx.formatter, ctx.task, cfg, 0)})
                signals.check(0, 0, lambda: None)  # a signal during the step-0 evaluation: nothing to save yet
            bar = progress.add_task("train", total=tr.steps, completed=start, status="")
            saved = start
            answers = NoAnswerWatch(cfg, tr.steps - start)
            for step in range(start, tr.steps):
                record = run_step(step, ctx)
                if (note := answers.see(record)) is not None and world.main:
                    console.print(f"[yellow]note:[/yellow] {note}", highlight=False, soft_wrap=True)
                done = step + 1
                if tr.eval_every and (done % tr.eval_every == 0 or done == tr.steps):
                    record.update(heldout_metrics(ctx.engine, ctx.formatter, ctx.task, cfg, done))
                if _log(sink, record):
                    faults.hit("step-logged")
                # A window's first step is checkpointed too: its seeds can be written again from it.
                if done % tr.save_every == 0 or done == tr.steps or (ctx.seeds is not None and ctx.seeds.opens_window(done)):
                    checkpoint(ctx, tokenizer, run.checkpoints, done)
                    saved = done
                progress.update(bar, advance=1, status=_status(record))
                signals.check(done, saved, lambda: checkpoint(ctx, tokenizer, run.checkpoints, done))
    except BaseException as err:
        details = err.manifest_fields() if isinstance(err, NonFiniteError) else {}
        if world.main:
            with contextlib.suppress(OSError):  # a full disk may refuse the manifest too
                if isinstance(err, Interrupted):
                    run.set_status("interrupted", **err.manifest_fields())
                else:
                    run.set_status("failed", error=f"{type(err).__name__}: {err}", **details)
        run.close()
        raise
    finally:
        if sink is not None:
            sink.close()
    if world.main:
        run.set_status("completed", finished_step=tr.steps)
    run.close()
    return run


def _rank_0_first(action: Callable[[], T]) -> T:
    """``action()`` on rank 0, then on the other ranks (one process: just ``action()``)."""
    if ranks.current().main:
        out = action()
        ranks.barrier()
        return out
    ranks.barrier()
    return action()


def _log(sink: MetricsSink | None, record: dict) -> bool:
    """Log ``record`` where this rank has a sink (rank 0); whether it did."""
    if sink is None:
        return False
    sink.log(record)
    return True


def _status(record: dict) -> str:
    text = f"reward {record['reward/mean']:.3f}  entropy {record['entropy']:.3f}"
    if "eval/greedy_accuracy" in record:
        text += f"  held-out {record['eval/greedy_accuracy']:.3f}"
    return text
