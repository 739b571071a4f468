"""Scores for ``scripts/results.py`` that no training run writes: the warmed-up model every run of a section
started from, and every kept checkpoint of a run (the pass@k trajectory), each with the final evaluation's code,
problems and sampling seeds (:func:`tsctl.evaluation.scoring.final_eval`).

- **The warm-up**: one record per sampling seed under ``docs/results/warmup/<task>-<weights digest>/seed=<s>/``,
  a run record (:mod:`tsctl.io.run_records`) with no training step: its ``final_eval.json`` is what the final
  evaluation of a run of seed ``s`` would say of the warmed-up model, so a section can pair every arm with the
  model it started from, seed by seed and problem by problem.
- **The trajectory**: ``docs/results/<sweep>/trajectory/<point>/step-<N>.json``, the final evaluation's sampled
  part (pass@1..k over the same problems with the same seed; greedy decoding left out) of the run's checkpoint
  ``N``; the last one is the final checkpoint, whose scores equal its ``final_eval.json``'s.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable

from omegaconf import OmegaConf

from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import SamplingParams
from tsctl.engines.factory import load_policy
from tsctl.evaluation.scoring import final_eval, pass_rates, sample_and_score
from tsctl.io import atomic
from tsctl.io import rounding as arithmetic
from tsctl.io.checkpoints import list_checkpoints
from tsctl.io.run_records import is_record, save_record
from tsctl.io.runs import RunDir, git_revision
from tsctl.runconfig import compose_config
from tsctl.trainer.rollout import servable_task

WARMUP = "warm-up"
"""The label of the warmed-up model's row and line on the page."""


def warmup_records(figures: Path, task: str, digest: str) -> Path:
    """The folder of the warm-up records of the built-in model of ``task`` whose weights' digest is ``digest``."""
    return figures / "warmup" / f"{task}-{digest}"


def score_warmup(figures: Path, overrides: list[str], model: Path, digest: str, seeds: int) -> list[Path]:
    """Score the warmed-up built-in model at ``model`` (weights digest ``digest``) with the final evaluation of a run
    composed from ``overrides``, once per sampling seed ``0..seeds-1`` that has no record yet. Returns the records written."""
    written = []
    for seed in range(seeds):
        cfg_node = compose_config([*overrides, f"seed={seed}"])
        cfg = cfg_node.cfg
        target = warmup_records(figures, cfg.task.name, digest) / f"seed={seed}"
        if is_record(target):
            continue
        policy = load_policy(cfg, str(model))
        scores = final_eval(policy.engine, policy.formatter, servable_task(cfg, policy.formatter, policy.engine), cfg, 0)
        manifest = {"status": "completed", "scored": WARMUP, "base_model": {"path": str(model), "weights_sha256": digest},
                    "arithmetic": arithmetic.current(policy.model.device), **git_revision()}
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg_node.node))
            (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
            (folder / "final_eval.json").write_text(json.dumps(scores))
            (folder / "metrics.jsonl").write_text("")
            save_record(folder, target)
        written.append(target)
        print(f"warm-up {digest}, seed {seed}: pass@8 {scores.get('pass@8', float('nan')):.3f}, greedy {scores['greedy_accuracy']:.3f}", flush=True)
    return written


def sampled_scores(cfg: TsctlConfig, checkpoint: Path, step: int) -> dict[str, Any]:
    """The sampled part of the final evaluation of ``checkpoint`` (its problems, samples and seed): pass@1..k and
    the solved samples of each problem."""
    policy = load_policy(cfg, str(checkpoint))
    task = servable_task(cfg, policy.formatter, policy.engine)
    problems = list(task.problems("heldout"))[: cfg.eval.limit or cfg.trainer.eval_samples_problems]
    e = cfg.engine
    params = SamplingParams(temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=cfg.seed)
    solved = sample_and_score(policy.engine, policy.formatter, task, problems, params, n=cfg.eval.k).solved
    return {"step": step, "sampled_problems": len(problems), "samples": cfg.eval.k,
            **pass_rates(solved, range(1, cfg.eval.k + 1)),
            "per_problem": {"sampled": {"ids": [p.id for p in problems], "solved": solved.sum(axis=1).tolist(), "samples": cfg.eval.k}}}


def score_trajectory(run: Path, target: Path, config: Callable[[Path], TsctlConfig]) -> list[Path]:
    """Score every checkpoint of the run folder ``run`` that has no score under ``target`` yet (``step-<N>.json``),
    its config from ``config(run)``. Returns the files written."""
    written = []
    cfg = None
    for step, checkpoint in list_checkpoints(RunDir(run).checkpoints):
        out = target / f"step-{step:06d}.json"
        if out.is_file():
            continue
        cfg = cfg or config(run)
        atomic.write_json(out, sampled_scores(cfg, checkpoint, step))
        written.append(out)
    return written
