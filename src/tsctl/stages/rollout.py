"""``tsctl rollout``: train's rollout as a stand-alone stage.

The current policy (``shards.checkpoint``/``shards.step``; ``model.path`` by default) continues the
seeds of ``seeds.parquet`` (written by ``tsctl seed``), adds the plain samples of every group,
grades them, and ``rollouts.parquet`` gets the samples with their advantages. It samples with train's
rollout stream at ``shards.data_step`` through the functions train uses
(:func:`tsctl.trainer.rollout.collect_groups`, :func:`tsctl.trainer.rewards.sample_advantages`).

The command says how many samples of a group continue a seed, as ``train`` does (``ratio`` of ``trainer.n``,
:func:`~tsctl.config.knobs.seeded_count`): a shard ``tsctl seed`` wrote for another count is refused, naming both counts.
The task's data is checked first (:func:`~tsctl.trainer.data_checks.check_data`, as ``train`` and ``tsctl seed`` do),
then the shard's rows (:mod:`tsctl.io.shard_contents`), both before the policy loads, then the rows against the policy's
vocabulary and its engine's context, before anything is sampled.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tsctl.config.compose import Composed
from tsctl.config.errors import ConfigError
from tsctl.config.knobs import seeded_count
from tsctl.config.schema import TsctlConfig
from tsctl.engines.factory import load_policy, task_demand
from tsctl.evaluation.targets import resolve_model
from tsctl.io.progress import console
from tsctl.io.runs import ROLLOUTS_FILE, SEEDS_FILE, shard_dir
from tsctl.io.shard_place import shard_place
from tsctl.io.shard_contents import check_rows
from tsctl.io.shards import ShardError, read_shard, write_shard
from tsctl.seeds.base import seeds_from_table
from tsctl.seeds.shard_limits import row_limits
from tsctl.stages.warmup import base_model_path
from tsctl.tasks.reward_controls import training_reward
from tsctl.trainer.data_checks import check_data
from tsctl.trainer.rewards import sample_advantages
from tsctl.trainer.rollout import Sampler, collect_groups, servable_task, step_params
from tsctl.trainer.rollout_shard import rollout_columns


def rollout(composed: Composed) -> Path:
    """Continue the seed shard with the current policy, add plain samples, grade; returns the rollout shard's path."""
    check_data(composed.cfg, scored=0)  # a data refusal before any model is loaded or warmed up
    out = shard_dir(composed.cfg) / ROLLOUTS_FILE
    with shard_place(out, composed.cfg.shards.overwrite):  # its folder held: no other writer, no temp file left, no shard replaced unasked
        return _write_rollouts(composed, out)


def _write_rollouts(composed: Composed, out: Path) -> Path:
    """The seeds of ``seeds.parquet`` beside ``out`` continued, plain samples added, all graded, written to ``out``."""
    cfg = composed.cfg
    folder = out.parent
    path = folder / SEEDS_FILE
    shard = read_shard(path, "seed")
    k = seeds_per_prompt(cfg, path, shard.metadata)
    check_rows(path, "seed", shard.table, row_limits(None, None, k), REWRITE)  # before the policy loads
    table = shard.table.to_pydict()
    seeds = seeds_from_table(table)
    target = resolve_model(cfg, cfg.shards.checkpoint, cfg.shards.step, "shards", base_model_path)
    prompt_ids = table["prompt_id"][::k]
    requests = len(prompt_ids) * cfg.trainer.n
    policy = load_policy(cfg, target.path, target.key, demand=lambda formatter: replace(task_demand(cfg, formatter), requests=requests))
    check_rows(path, "seed", shard.table, row_limits(policy.model, policy.engine, k), REWRITE)
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


REWRITE = "write it again with `tsctl seed`, this command's overrides and shards.overwrite=true"
"""The fix of a seed shard whose rows this command cannot continue."""


def seeds_per_prompt(cfg: TsctlConfig, path: Path, metadata: dict[str, str]) -> int:
    """The seeds of each group this command continues, :func:`~tsctl.config.knobs.seeded_count` of ``cfg``; a shard
    (``path``, its ``metadata``) written for another count is refused in one line naming both and the fixes."""
    k, written = seeded_count(cfg), metadata.get("seeds_per_prompt")
    asks = f"ratio={cfg.ratio:g} with trainer.n={cfg.trainer.n} seeds {k} of each group's samples"
    shard_ratio = f"ratio={metadata['ratio']} trainer.n={metadata['trainer_n']}" if {"ratio", "trainer_n"} <= metadata.keys() else None
    if k == 0:
        said = f"; pass the ratio it was written for ({shard_ratio})" if shard_ratio else "; pass the ratio it was written for"
        raise ConfigError("ratio", f"{asks}, so no seed of {path} is continued{said}")
    if written is None or written == str(k):
        return k  # no count recorded (not from `tsctl seed`): the rows' blocks are checked instead
    other = f", or run `tsctl rollout` with {shard_ratio} as the shard was written" if shard_ratio else ""
    raise ShardError(
        f"{path}: written with {written} seed(s) per prompt, but this command's {asks}; write a matching shard: "
        f"rerun `tsctl seed` with this command's overrides and shards.overwrite=true{other}"
    )
