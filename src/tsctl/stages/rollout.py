"""``tsctl rollout``: train's rollout as a stand-alone stage.

The current policy (``shards.checkpoint``/``shards.step``; ``model.path`` by default) continues the
seeds of ``seeds.parquet`` (written by ``tsctl seed``), adds the plain samples of every group,
grades them, and ``rollouts.parquet`` gets the samples with their advantages. It samples with train's
rollout stream at ``shards.data_step`` through the functions train uses
(:func:`tsctl.trainer.rollout.collect_groups`, :func:`tsctl.trainer.rewards.sample_advantages`).
"""

from __future__ import annotations

from pathlib import Path

from tsctl.config.compose import Composed
from tsctl.config.errors import ConfigError
from tsctl.engines.factory import load_policy
from tsctl.evaluation.targets import resolve_model
from tsctl.io.progress import console
from tsctl.io.runs import ROLLOUTS_FILE, SEEDS_FILE, shard_dir
from tsctl.io.shards import checksum_path, read_shard, write_shard
from tsctl.seeds.base import seeds_from_table
from tsctl.stages.warmup import base_model_path
from tsctl.trainer.rewards import sample_advantages
from tsctl.trainer.rollout import collect_groups, servable_task, step_params
from tsctl.trainer.rollout_shard import rollout_columns


def rollout(composed: Composed) -> Path:
    """Continue the seed shard with the current policy, add plain samples, grade; returns the rollout shard's path."""
    cfg = composed.cfg
    folder = shard_dir(cfg)
    out = folder / ROLLOUTS_FILE
    if (out.exists() or checksum_path(out).exists()) and not cfg.shards.overwrite:  # a checksum alone: a write cut short
        raise ConfigError("shards.overwrite", f"{out} already exists{'' if out.exists() else ' (its checksum file does)'}; pass shards.overwrite=true to replace it or shards.out_dir=... to keep it")
    shard = read_shard(folder / SEEDS_FILE, "seed")
    k = int(shard.metadata["seeds_per_prompt"])
    table = shard.table.to_pydict()
    seeds = seeds_from_table(table)
    target = resolve_model(cfg, cfg.shards.checkpoint, cfg.shards.step, "shards", base_model_path)
    policy = load_policy(cfg, target.path, target.key)
    task = servable_task(cfg, policy.formatter, policy.engine)
    by_id = {p.id: p for p in task.problems("train")}
    prompt_ids = table["prompt_id"][::k]
    missing = [pid for pid in prompt_ids if pid not in by_id]
    if missing:
        raise ConfigError(
            "task", f"{folder / SEEDS_FILE} holds prompts {missing[:3]} that the configured task does not have (or leaves out as too "
            "long for this engine); use the task, engine and model settings the seeds were made with"
        )
    groups = [seeds[g * k : (g + 1) * k] for g in range(len(prompt_ids))]
    samples = collect_groups([by_id[pid] for pid in prompt_ids], groups, cfg.trainer.n, policy.engine, policy.formatter, task, step_params(cfg, cfg.shards.data_step))
    advantages = sample_advantages(samples, cfg)
    write_shard(out, "rollout", rollout_columns(samples, advantages, target.step or 0), overwrite=cfg.shards.overwrite)
    reward = sum(s.reward for s in samples) / len(samples)
    console.print(f"wrote {len(samples)} samples ({sum(s.seeded for s in samples)} seeded) to {out}; mean reward {reward:.3f}")
    return out
