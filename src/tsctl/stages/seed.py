"""``tsctl seed``: train's seed writing as a stand-alone stage.

A behaviour checkpoint (``shards.checkpoint``/``shards.step``; ``model.path`` by default) samples
:func:`~tsctl.config.knobs.seeded_count` full responses for every prompt ``tsctl train`` draws at steps
``shards.data_step ..`` (``shards.steps`` of them), and ``seeds.parquet`` gets them with their pi_b
log-probs and cut points (:func:`tsctl.seeds.generate.seed_columns`, the function train's windows
use, with train's seed stream), so ``tsctl rollout`` and a train run see the same structure. The task's data is
checked first (:func:`~tsctl.trainer.data_checks.check_data`, as ``train`` does), before any model is loaded or warmed up.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tsctl.config.compose import Composed
from tsctl.config.errors import ConfigError
from tsctl.config.knobs import seeded_count, uses_seeds
from tsctl.config.rng import Stream, step_seed
from tsctl.config.schema import TsctlConfig
from tsctl.engines.factory import load_policy, task_demand
from tsctl.evaluation.targets import resolve_model
from tsctl.io.progress import console
from tsctl.io.runs import SEEDS_FILE, shard_dir
from tsctl.io.shard_place import shard_place
from tsctl.io.shards import write_shard
from tsctl.runconfig.idle import idle_settings
from tsctl.seeds.generate import seed_columns
from tsctl.seeds.selectors import SELECTORS
from tsctl.seeds.sources import SOURCES
from tsctl.stages.warmup import base_model_path
from tsctl.tasks.schedule import step_prompts
from tsctl.trainer.data_checks import check_data
from tsctl.trainer.rollout import servable_task


def seed(composed: Composed) -> Path:
    """Write the seed shard; returns its path."""
    cfg = composed.cfg
    if not uses_seeds(cfg):
        raise ConfigError("ratio", "ratio=0 seeds no sample; use e.g. ratio=25")
    k = seeded_count(cfg)
    source, selector = cfg.seeds.source, cfg.seeds.selector
    for key, value, elsewhere in (("seeds.source", source, not SOURCES.needs(source).own), ("seeds.selector", selector, SELECTORS.needs(selector).pool)):
        if elsewhere:
            raise ConfigError(key, f"tsctl seed writes the seeds of shards.checkpoint only; {key}={value} applies to tsctl train: "
                                   f"drop it here{_with_readers(cfg, key)}")
    check_data(cfg, scored=0)  # a data refusal before any model is loaded or warmed up
    out = shard_dir(cfg) / SEEDS_FILE
    with shard_place(out, cfg.shards.overwrite):  # its folder held: no other writer, no temp file left, no shard replaced unasked
        return _write_seeds(composed, out, k)


def _with_readers(cfg: TsctlConfig, key: str) -> str:
    """The settings ``cfg`` sets that only the entry ``key`` names reads (:func:`~tsctl.runconfig.idle.idle_settings` of
    ``cfg`` with ``key`` at its default), as words to append to "drop it here"; empty where there are none."""
    section, name = key.split(".")
    default = replace(cfg.seeds, **{name: getattr(type(cfg.seeds)(), name)})
    tied = [err.key for err in idle_settings(replace(cfg, **{section: default}))]
    return f", with {' and '.join(tied)}, which only it reads" if tied else ""


def _write_seeds(composed: Composed, out: Path, k: int) -> Path:
    """The behaviour checkpoint's ``k`` seeds for each prompt of the shard's steps, written to ``out``."""
    cfg = composed.cfg
    target = resolve_model(cfg, cfg.shards.checkpoint, cfg.shards.step, "shards", base_model_path)
    sh, bs = cfg.shards, cfg.trainer.batch_size
    policy = load_policy(cfg, target.path, target.key, demand=lambda formatter: replace(task_demand(cfg, formatter), requests=sh.steps * bs * k))
    task = servable_task(cfg, policy.formatter, policy.engine)
    problems = task.problems("train")  # as tsctl train has them
    steps = range(sh.data_step, sh.data_step + sh.steps)
    indices = [i for s in steps for i in step_prompts(cfg.seed, s, bs, len(problems))]
    columns = seed_columns(
        policy.model, policy.engine, policy.formatter, task, [problems[i] for i in indices], k, cfg,
        checkpoint=target.path, checkpoint_step=target.step or 0,
        sample_seed=step_seed(cfg.seed, sh.data_step, Stream.SEED_SAMPLING), serve_steps=[s for s in steps for _ in range(bs)],
    )
    write_shard(out, "seed", columns, {"seeds_per_prompt": str(k), "ratio": f"{cfg.ratio:g}", "trainer_n": str(cfg.trainer.n), "first_step": str(sh.data_step)}, overwrite=sh.overwrite)
    mean_cut = sum(columns["cut"]) / len(columns["cut"])
    console.print(f"wrote {len(indices)} prompts x {k} seeds to {out} (mean prefix {mean_cut:.1f} tokens)")
    return out
