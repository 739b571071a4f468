"""``tsctl rollout``: train's rollout as a stand-alone stage.

The current policy (``shards.checkpoint``/``shards.step``; ``model.path`` by default) continues the
seeds of ``seeds.parquet`` (written by ``tsctl seed``), adds the plain samples of every group,
grades them, and ``rollouts.parquet`` gets the samples with their advantages. It samples with train's
rollout stream at ``shards.data_step`` through the functions train uses
(:func:`tsctl.trainer.rollout.collect_groups`, :func:`tsctl.trainer.rewards.sample_advantages`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tsctl.config.compose import Composed
from tsctl.config.errors import ConfigError
from tsctl.engines.factory import load_policy, task_demand
from tsctl.evaluation.targets import resolve_model
from tsctl.io.progress import console
from tsctl.io.runs import ROLLOUTS_FILE, SEEDS_FILE, shard_dir
from tsctl.io.shard_place import shard_place
from tsctl.io.shards import read_shard, write_shard
from tsctl.seeds.base import seeds_from_table
from tsctl.stages.warmup import base_model_path
from tsctl.tasks.reward_controls import training_reward
from tsctl.trainer.rewards import sample_advantages
from tsctl.trainer.rollout import Sampler, collect_groups, servable_task, step_params
from tsctl.trainer.rollout_shard import rollout_columns


def rollout(composed: Composed) -> Path:
    """Continue the seed shard with the current policy, add plain samples, grade; returns the rollout shard's path."""
    out = shard_dir(composed.cfg) / ROLLOUTS_FILE
    with shard_place(out, composed.cfg.shards.overwrite):  # its folder held: no other writer, no temp file left, no shard replaced unasked
        return _write_rollouts(composed, out)


def _write_rollouts(composed: Composed, out: Path) -> Path:
    """The seeds of ``seeds.parquet`` beside ``out`` continued, plain samples added, all graded, written to ``out``."""
    cfg = composed.cfg
    folder = out.parent
    shard = read_shard(folder / SEEDS_FILE, "seed")
    k = int(shard.metadata["seeds_per_prompt"])
    table = shard.table.to_pydict()
    seeds = seeds_from_table(table)
    target = resolve_model(cfg, cfg.shards.checkpoint, cfg.shards.step, "shards", base_model_path)
    prompt_ids = table["prompt_id"][::k]
    requests = len(prompt_ids) * cfg.trainer.n
    policy = load_policy(cfg, target.path, target.key, demand=lambda formatter: replace(task_demand(cfg, formatter), requests=requests))
    task = servable_task(cfg, policy.formatter, policy.engine)
    by_id = {p.id: p for p in task.problems("train")}
    missing = [pid for pid in prompt_ids if pid not in by_id]
    if missing:
        raise ConfigError(
            "task", f"{folder / SEEDS_FILE} holds prompts {missing[:3]} that the configured task does not have (or leaves out as too "
            "long for this engine); use the task, engine and model settings the seeds were made with"
        )
    groups = [seeds[g * k : (g + 1) * k] for g in range(len(prompt_ids))]
    samples = collect_groups(Sampler(policy.engine, policy.formatter, task, training_reward(cfg.task, cfg.seed, cfg.shards.data_step)), [by_id[pid] for pid in prompt_ids], groups, cfg.trainer.n, step_params(cfg, cfg.shards.data_step))
    advantages = sample_advantages(samples, cfg)
    write_shard(out, "rollout", rollout_columns(samples, advantages, target.step or 0), overwrite=cfg.shards.overwrite)
    reward = sum(s.reward for s in samples) / len(samples)
    console.print(f"wrote {len(samples)} samples ({sum(s.seeded for s in samples)} seeded) to {out}; mean reward {reward:.3f}")
    return out
