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
   one no-grad forward over the batch (``trainer.old_logprobs``, see ``trainer/pi_old.py``); the
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
   ``trainer/nonfinite.py``).

Kept from DAPO: clip-higher, token-mean loss, dynamic sampling and overlong shaping (both off by
default), no KL term by default. Dropped: value model, reward model (rewards are rule-based).
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tsctl import faults
from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import SamplingParams
from tsctl.engines.factory import build_engine
from tsctl.models.builtin import ensure_builtin
from tsctl.models.loading import load_model
from tsctl.models.logits import logits_head
from tsctl.models.precision import compute_dtype, model_device, require_fp32_master
from tsctl.models.prompts import PromptFormatter
from tsctl.progress import console, make_progress
from tsctl.seeds.bank import SeedBank
from tsctl.tasks.registry import build_task
from tsctl.trainer import pi_old
from tsctl.trainer.batch import enable_activation_checkpointing, pack
from tsctl.trainer.checkpoint import latest_checkpoint, load_state, prune_checkpoints, rng_state, save_checkpoint, set_rng_state
from tsctl.trainer.heldout import heldout_metrics
from tsctl.trainer.nonfinite import NonFiniteError, NonFiniteGuard
from tsctl.trainer.reference import load_reference, reference_logprobs
from tsctl.seeds.shards import write_shard
from tsctl.seeds.unknown_logprobs import ratio_inputs
from tsctl.trainer.rollout import collect_groups
from tsctl.trainer.rewards import sample_advantages
from tsctl.trainer.rollout_shard import rollout_columns
from tsctl.trainer.samples import PREFIX, Sample
from tsctl.trainer.schedule import extra_prompts, step_prompts, step_seed
from tsctl.trainer.step_metrics import rollout_metrics
from tsctl.trainer.update import policy_update

if TYPE_CHECKING:
    from tsctl.config.compose import Composed
    from tsctl.runs import RunDir

SAMPLE_SEED, SHUFFLE_SEED = 1, 2


def base_model_path(cfg: TsctlConfig) -> str:
    """``model.path``, building and warming up the built-in model first when it is ``builtin``."""
    return str(ensure_builtin(cfg)) if cfg.model.path == "builtin" else cfg.model.path


def lr_lambda(cfg: TsctlConfig):
    """Multiplier of the peak LR per optimiser step: linear warm-up, then constant or cosine."""
    total = cfg.trainer.steps * cfg.trainer.mini_batches * cfg.trainer.epochs
    warm = cfg.trainer.warmup_steps

    def factor(opt_step: int) -> float:
        if opt_step < warm:
            return (opt_step + 1) / warm
        if cfg.trainer.schedule == "cosine":
            return 0.5 * (1 + math.cos(math.pi * (opt_step - warm) / max(1, total - warm)))
        return 1.0

    return factor


def load_policy(cfg: TsctlConfig, path: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The policy to train from ``path``: fp32 parameters on ``model.device``, its LM head checked
    (:func:`~tsctl.models.logits.logits_head`), activation checkpointing on when configured."""
    require_fp32_master(cfg.model.dtype)
    model, tokenizer = load_model(path, cfg.model.dtype, cfg.model.device)
    logits_head(model)  # refuses a model whose logits post-processing the trainer would not reproduce
    if cfg.trainer.gradient_checkpointing:
        enable_activation_checkpointing(model)
    return model, tokenizer


def make_optimizer(cfg: TsctlConfig, model: PreTrainedModel) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over the (float32) parameters and its learning-rate schedule (:func:`lr_lambda`)."""
    tr = cfg.trainer
    optimizer = torch.optim.AdamW(model.parameters(), lr=tr.lr, weight_decay=tr.weight_decay, betas=(0.9, 0.999))
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))


def train(composed: Composed) -> RunDir:
    """Run (or resume) the RL loop described in the module docstring; returns the run folder.

    The model, data and engine are loaded before the run folder is created (a failed start leaves
    none); the folder is then held locked until the run ends (see :func:`tsctl.runs.open_run`).
    """
    # Run folders and metric sinks need OmegaConf; train_step and the rest of this module do not
    # (bench/gpu_check.py drives train_step on images without Hydra or OmegaConf).
    from tsctl.runs import locate_run, open_run
    from tsctl.sinks import MetricsSink

    cfg = composed.cfg
    require_fp32_master(cfg.model.dtype)
    tr = cfg.trainer
    located = locate_run(cfg, composed.node, "train")
    resume_from = latest_checkpoint(located.checkpoints)
    base = base_model_path(cfg)
    model, tokenizer = load_policy(cfg, str(resume_from[1] if resume_from else base))
    formatter = PromptFormatter(tokenizer, cfg.model.use_chat_template, model.generation_config)
    task = build_task(cfg.task)
    problems = list(task.problems("train"))
    engine = build_engine(
        cfg.engine, model, formatter.end_ids, formatter.pad_id, str(resume_from[1] if resume_from else base),
        seed=cfg.seed, compute_dtype=compute_dtype(cfg, model),
    )
    optimizer, scheduler = make_optimizer(cfg, model)
    ref_model = load_reference(cfg, base)
    seeds = SeedBank(located.path / "seeds", cfg, formatter, task, problems, located.checkpoints, base) if cfg.ratio > 0 else None
    if seeds is not None and resume_from:
        seeds.check_resume(resume_from[0])
    run = open_run(cfg, composed.node, "train")
    if seeds is not None and cfg.algo.dynamic_sampling:
        console.print(
            "[yellow]note:[/yellow] dynamic sampling's refill prompts get no seeds, so fewer than "
            f"ratio={cfg.ratio:g}% of the kept samples are seeded (the metrics' tokens_by_source show how many)",
            highlight=False,
        )
    start = 0
    guard = NonFiniteGuard(tr.nonfinite, tr.max_nonfinite_skips)
    if resume_from:
        start, state = resume_from[0], load_state(resume_from[1])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        guard.skips = state.get("nonfinite_skips", 0)
        run.truncate_metrics(start)
    else:
        torch.manual_seed(cfg.seed)
        run.truncate_metrics(-1)
    run.set_status("running", started_step=start)
    sink = MetricsSink(run, cfg.logger, composed.node)
    try:
        if start == 0 and tr.eval_every:
            sink.log({"step": 0, **heldout_metrics(engine, formatter, task, cfg, 0)})
        with make_progress() as progress:
            bar = progress.add_task("train", total=tr.steps, completed=start, status="")
            for step in range(start, tr.steps):
                t_seeds = time.perf_counter()
                if seeds is not None:
                    seeds.prepare(step, model, engine)
                seeds_time = time.perf_counter() - t_seeds
                rollouts = run.path / "rollouts" if tr.save_rollouts else None
                guard.begin_step(step + 1)
                record = train_step(step, cfg, model, engine, formatter, task, problems, optimizer, scheduler, seeds, ref_model, rollouts, guard)
                # Seed generation (at refresh steps) counts toward the step that triggered it.
                record["time/seeds"] = seeds_time
                record["time/step"] += seeds_time
                done = step + 1
                if tr.eval_every and (done % tr.eval_every == 0 or done == tr.steps):
                    record.update(heldout_metrics(engine, formatter, task, cfg, done))
                sink.log(record)
                faults.hit("step-logged")
                # A window's first step is checkpointed too: its seeds can be written again from it.
                if done % tr.save_every == 0 or done == tr.steps or (seeds is not None and seeds.opens_window(done)):
                    state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state(), "nonfinite_skips": guard.skips}
                    save_checkpoint(run.checkpoints, done, model, tokenizer, state)
                    prune_checkpoints(run.checkpoints, tr.keep_checkpoints, protect=seeds.keep(done) if seeds is not None else set())
                progress.update(bar, advance=1, status=_status(record))
    except BaseException as err:
        details = err.manifest_fields() if isinstance(err, NonFiniteError) else {}
        with contextlib.suppress(OSError):  # a full disk may refuse the manifest too
            run.set_status("failed", error=f"{type(err).__name__}: {err}", **details)
        run.close()
        raise
    finally:
        sink.close()
    run.set_status("completed", finished_step=tr.steps)
    run.close()
    return run


def _status(record: dict) -> str:
    text = f"reward {record['reward/mean']:.3f}  entropy {record['entropy']:.3f}"
    if "eval/greedy_accuracy" in record:
        text += f"  held-out {record['eval/greedy_accuracy']:.3f}"
    return text


def train_step(step, cfg, model, engine, formatter, task, problems, optimizer, scheduler, seeds, ref_model, rollouts_dir: Path | None = None, guard: NonFiniteGuard | None = None) -> dict:
    """One step (rollout, advantages, old log-probs, update); returns its metrics record.

    With ``rollouts_dir``, the step's samples are also written there as ``step-<N>.parquet``;
    ``guard`` is the run's non-finite guard (raises :class:`NonFiniteError` to stop the run).
    """
    tr, al, e = cfg.trainer, cfg.algo, cfg.engine
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    params = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=step_seed(cfg.seed, step, SAMPLE_SEED))
    samples = rollout(step, cfg, engine, formatter, task, problems, seeds, params)
    timings["time/generate"] = time.perf_counter() - t0
    generated_tokens = sum(len(s.generated_ids) for s in samples)

    advantages = sample_advantages(samples, cfg)
    attribution = seeds.observe(step, samples, advantages) if seeds is not None else {}
    batch = pack(samples, advantages, formatter.pad_id, model_device(model))
    if rollouts_dir is not None:
        rollouts_dir.mkdir(parents=True, exist_ok=True)
        write_shard(rollouts_dir / f"step-{step + 1:06d}.parquet", "rollout", rollout_columns(samples, advantages, step), overwrite=True)

    engine.sleep()  # rollouts are done: an engine with its own GPU memory frees it for the update
    t1 = time.perf_counter()
    gap: dict[str, float] = {}
    engine_old = pi_old.from_engine(cfg, engine, model)
    if engine_old:
        old, entropy = pi_old.engine_stats(samples, batch)
    else:
        old, entropy = pi_old.recompute_for(cfg, model, batch)
        gap = pi_old.logprob_gap(pi_old.engine_logprobs(samples, batch), old, batch)
    ref = reference_logprobs(ref_model, batch, cfg) if ref_model is not None else None
    timings["time/old_logprobs"] = time.perf_counter() - t1
    loss_mask = batch.resp_mask.clone()
    if not cfg.seeds.train_prefix:
        loss_mask &= batch.source != PREFIX
    if al.overlong == "mask":
        loss_mask &= torch.tensor([s.finished for s in samples], device=batch.device).unsqueeze(1)

    t2 = time.perf_counter()
    generator = torch.Generator().manual_seed(step_seed(cfg.seed, step, SHUFFLE_SEED))
    denominators, loss_mask = ratio_inputs(old, batch, loss_mask, cfg, model, engine_old)
    update = policy_update(model, optimizer, scheduler, batch, denominators, loss_mask, cfg, generator, ref, guard)
    timings["time/update"] = time.perf_counter() - t2
    engine.load_weights(model.state_dict())
    engine.wake_up()
    trained_tokens = int(batch.attention_mask.sum()) * tr.epochs
    timings["time/step"] = time.perf_counter() - t0
    return {
        "step": step + 1,
        **rollout_metrics(samples, batch, entropy, list(tr.position_bins), step),
        **attribution,
        **gap,
        **update.means(),
        **timings,
        "lr": scheduler.get_last_lr()[0],
        "samples": len(samples),
        "generate_tokens_per_s": generated_tokens / max(timings["time/generate"], 1e-9),
        "train_tokens_per_s": trained_tokens / max(timings["time/update"], 1e-9),
    }


def rollout(step: int, cfg: TsctlConfig, engine, formatter, task, problems, seeds, params) -> list[Sample]:
    """The step's groups; with dynamic sampling, all-equal groups are replaced by fresh prompts."""
    tr = cfg.trainer
    indices = step_prompts(cfg.seed, step, tr.batch_size, len(problems))
    group_seeds = seeds.for_step(step, indices) if seeds is not None else None
    samples = collect_groups([problems[i] for i in indices], group_seeds, tr.n, engine, formatter, task, params)
    if not cfg.algo.dynamic_sampling:
        return samples
    kept = _informative(samples)
    for round_ in range(cfg.algo.max_resample_rounds):
        missing = tr.batch_size - len({s.group for s in kept})
        if missing <= 0:
            break
        extra = extra_prompts(cfg.seed, step, round_, missing, len(problems))
        more_params = SamplingParams(params.temperature, params.top_p, params.max_new_tokens, step_seed(cfg.seed, step, 10 + round_))
        first = tr.batch_size * (round_ + 1)
        extra_seeds = seeds.for_extra(step, extra) if seeds is not None else None
        kept += _informative(collect_groups([problems[i] for i in extra], extra_seeds, tr.n, engine, formatter, task, more_params, first_group=first))
    groups = sorted({s.group for s in kept})[: tr.batch_size]
    chosen = [s for s in kept if s.group in set(groups)]
    return chosen if chosen else samples


def _informative(samples: list[Sample]) -> list[Sample]:
    """Samples of groups whose rewards are not all equal."""
    by_group: dict[int, list[float]] = {}
    for s in samples:
        by_group.setdefault(s.group, []).append(s.reward)
    return [s for s in samples if len(set(by_group[s.group])) > 1]
