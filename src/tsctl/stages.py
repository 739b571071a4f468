"""The stand-alone stages ``tsctl seed`` and ``tsctl rollout``: train's seed and rollout path, by hand.

``seed`` samples full responses from a behaviour checkpoint for the prompts ``tsctl train`` draws at
steps ``shards.data_step ..`` and writes ``seeds.parquet``; ``rollout`` continues those seeds with
the current policy, adds the plain samples, grades them and writes ``rollouts.parquet``. Both use
the same functions as the training loop, so their shards have the same structure as train's.
"""

from __future__ import annotations

from pathlib import Path

from tsctl.config.compose import Composed
from tsctl.config.errors import ConfigError
from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import SamplingParams
from tsctl.engines.factory import build_engine
from tsctl.evaluation.targets import resolve_model
from tsctl.models.loading import load_model
from tsctl.models.precision import compute_dtype
from tsctl.models.prompts import PromptFormatter
from tsctl.progress import console
from tsctl.seeds.bank import SEED_SAMPLING
from tsctl.seeds.generate import seed_columns
from tsctl.seeds.shards import read_shard, write_shard
from tsctl.tasks.registry import build_task
from tsctl.train import SAMPLE_SEED
from tsctl.trainer.rewards import sample_advantages
from tsctl.trainer.rollout import collect_groups, seeded_count, seeds_from_table
from tsctl.trainer.rollout_shard import rollout_columns
from tsctl.trainer.schedule import step_prompts, step_seed

SEEDS_FILE, ROLLOUTS_FILE = "seeds.parquet", "rollouts.parquet"


def shard_dir(cfg: TsctlConfig) -> Path:
    """``shards.out_dir``, or ``<runs_dir>/<experiment>/shards``."""
    return Path(cfg.shards.out_dir) if cfg.shards.out_dir else Path(cfg.runs_dir) / cfg.experiment / "shards"


def _policy(cfg: TsctlConfig):
    """The model named by ``shards.checkpoint``/``shards.step``: (model, formatter, target)."""
    target = resolve_model(cfg, cfg.shards.checkpoint, cfg.shards.step, "shards")
    model, tokenizer = load_model(target.path, cfg.model.dtype, cfg.model.device, key=target.key)
    return model.eval(), PromptFormatter(tokenizer, cfg.model.use_chat_template, model.generation_config), target


def seed(composed: Composed) -> Path:
    """Write the seed shard; returns its path."""
    cfg = composed.cfg
    k = seeded_count(cfg.trainer.n, cfg.ratio)
    if k == 0:
        raise ConfigError("ratio", f"ratio={cfg.ratio:g} seeds no sample of a group of n={cfg.trainer.n}; use e.g. ratio=25")
    for key, value, default in (("seeds.source", cfg.seeds.source, "self"), ("seeds.selector", cfg.seeds.selector, "latest")):
        if value != default:
            raise ConfigError(key, f"tsctl seed writes the seeds of shards.checkpoint only; {key}={value} applies to tsctl train")
    out = shard_dir(cfg) / SEEDS_FILE
    if out.exists() and not cfg.shards.overwrite:
        raise ConfigError("shards.overwrite", f"{out} already exists; pass shards.overwrite=true to replace it or shards.out_dir=... to keep it")
    model, formatter, target = _policy(cfg)
    task = build_task(cfg.task)
    problems = list(task.problems("train"))
    sh, bs = cfg.shards, cfg.trainer.batch_size
    steps = range(sh.data_step, sh.data_step + sh.steps)
    indices = [i for s in steps for i in step_prompts(cfg.seed, s, bs, len(problems))]
    engine = build_engine(cfg.engine, model, formatter.end_ids, formatter.pad_id, target.path, seed=cfg.seed, compute_dtype=compute_dtype(cfg, model))
    columns = seed_columns(
        model, engine, formatter, task, [problems[i] for i in indices], k, cfg,
        checkpoint=target.path, checkpoint_step=target.step or 0,
        sample_seed=step_seed(cfg.seed, sh.data_step, SEED_SAMPLING), serve_steps=[s for s in steps for _ in range(bs)],
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_shard(out, "seed", columns, {"seeds_per_prompt": str(k), "first_step": str(sh.data_step)}, overwrite=sh.overwrite)
    mean_cut = sum(columns["cut"]) / len(columns["cut"])
    console.print(f"wrote {len(indices)} prompts x {k} seeds to {out} (mean prefix {mean_cut:.1f} tokens)")
    return out


def rollout(composed: Composed) -> Path:
    """Continue the seed shard with the current policy, add plain samples, grade; returns the rollout shard's path."""
    cfg = composed.cfg
    folder = shard_dir(cfg)
    out = folder / ROLLOUTS_FILE
    if out.exists() and not cfg.shards.overwrite:
        raise ConfigError("shards.overwrite", f"{out} already exists; pass shards.overwrite=true to replace it or shards.out_dir=... to keep it")
    shard = read_shard(folder / SEEDS_FILE, "seed")
    k = int(shard.metadata["seeds_per_prompt"])
    table = shard.table.to_pydict()
    seeds = seeds_from_table(table)
    task = build_task(cfg.task)
    by_id = {p.id: p for p in task.problems("train")}
    prompt_ids = table["prompt_id"][::k]
    missing = [pid for pid in prompt_ids if pid not in by_id]
    if missing:
        raise ConfigError("task", f"{folder / SEEDS_FILE} holds prompts {missing[:3]} that the configured task does not have; use the task config the seeds were made with")
    model, formatter, target = _policy(cfg)
    engine = build_engine(cfg.engine, model, formatter.end_ids, formatter.pad_id, target.path, seed=cfg.seed, compute_dtype=compute_dtype(cfg, model))
    e = cfg.engine
    params = SamplingParams(e.temperature, e.top_p, e.max_new_tokens, step_seed(cfg.seed, cfg.shards.data_step, SAMPLE_SEED))
    groups = [seeds[g * k : (g + 1) * k] for g in range(len(prompt_ids))]
    samples = collect_groups([by_id[pid] for pid in prompt_ids], groups, cfg.trainer.n, engine, formatter, task, params)
    advantages = sample_advantages(samples, cfg)
    write_shard(out, "rollout", rollout_columns(samples, advantages, target.step or 0), overwrite=cfg.shards.overwrite)
    reward = sum(s.reward for s in samples) / len(samples)
    console.print(f"wrote {len(samples)} samples ({sum(s.seeded for s in samples)} seeded) to {out}; mean reward {reward:.3f}")
    return out
