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

Where each part lives: :func:`train` runs the step loop with held-out evaluation and checkpoints inside the run's
:class:`~tsctl.trainer.run_session.RunSession` (the run folder, its lock, the resume plan, the manifest, the metric
sink and the signals); the trainer (:mod:`tsctl.trainer.step`) sets the run's
:class:`~tsctl.trainer.context.StepContext` up (sampler, learner, seed bank) and takes each step, steps
1-6 above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from tsctl.distributed import world as ranks
from tsctl.evaluation.scoring import heldout_metrics
from tsctl.io import faults, rounding
from tsctl.io.progress import console, make_progress
from tsctl.io.runs import RunDir
from tsctl.models.loading import resolve_device
from tsctl.models.precision import require_fp32_master
from tsctl.stages.warmup import base_model_path
from tsctl.trainer.checkpointing import checkpoint
from tsctl.trainer.data_checks import check_data, train_scored
from tsctl.trainer.no_answer import NoAnswerWatch
from tsctl.trainer.run_session import RunSession, rank_0_first
from tsctl.trainer.step import run_step, setup
from tsctl.trainer.stop_signals import Interrupted

if TYPE_CHECKING:
    from tsctl.config.compose import Composed
    from tsctl.config.schema import TsctlConfig


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
    with RunSession(composed, world) as session:  # the run's lock, resume plan, manifest, metric sink and signals
        check_data(cfg, train_scored(cfg))  # a data refusal before any model is built or warmed up
        session.check_same_data()  # a resume's data is the data the run started with
        plan, base = session.plan, rank_0_first(lambda: base_model_path(cfg))  # the built-in model is warmed up once
        ctx = setup(cfg, str(plan.start[1] if plan.start else base), base, session.run, world)
        if ctx.seeds is not None and plan.start:
            ctx.seeds.check_resume(plan.start[0], ctx.learner.parallel.inference, ctx.sampler.engine)
        session.make_folder()  # a new run's folder is made once its model and data have loaded
        if plan.start:
            ctx.learner.load(plan.start[1])
        else:
            torch.manual_seed(cfg.seed)
        signals, start = session.begin(base), session.start
        _notes(ctx.seeds is not None, cfg)
        ctx.rollouts_dir = session.run.path / "rollouts" if tr.save_rollouts else None
        with make_progress() as progress:
            if start == 0 and tr.eval_every:
                session.log({"step": 0, **heldout_metrics(ctx.sampler.engine, ctx.sampler.formatter, ctx.sampler.task, cfg, 0)})
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
                    record.update(heldout_metrics(ctx.sampler.engine, ctx.sampler.formatter, ctx.sampler.task, cfg, done))
                if session.log(record):
                    faults.hit("step-logged")
                # A window's first step is checkpointed too: its seeds can be written again from it.
                if done % tr.save_every == 0 or done == tr.steps or (ctx.seeds is not None and ctx.seeds.opens_window(done)):
                    checkpoint(ctx, session.run.checkpoints, done)
                    saved = done
                progress.update(bar, advance=1, status=_status(record))
                signals.check(done, saved, lambda: checkpoint(ctx, session.run.checkpoints, done))
    return session.run


def _notes(seeded: bool, cfg: TsctlConfig) -> None:
    """The run's start notes: with seeds (``seeded``), that dynamic sampling's refill prompts get none."""
    if seeded and cfg.algo.dynamic_sampling:
        console.print(
            "[yellow]note:[/yellow] dynamic sampling's refill prompts get no seeds, so fewer than "
            f"ratio={cfg.ratio:g}% of the kept samples are seeded (the metrics' tokens_by_source show how many)",
            highlight=False,
        )


def _status(record: dict) -> str:
    text = f"reward {record['reward/mean']:.3f}  entropy {record['entropy']:.3f}"
    if "eval/greedy_accuracy" in record:
        text += f"  held-out {record['eval/greedy_accuracy']:.3f}"
    return text
