"""``tsctl eval``: score checkpoints on benchmarks, write the results, return them for a table.

Checkpoints come from ``eval.checkpoint`` and ``eval.step`` (:mod:`tsctl.evaluation.targets`),
benchmarks from ``eval.benchmarks`` (:mod:`tsctl.evaluation.suites`: ``heldout`` is the configured
task's held-out split, any other name a ``conf/benchmark/<name>.yaml`` or a YAML path). All
benchmarks are loaded before any model, so a data error stops the command at once; once the first
model is loaded, every prompt is checked against its engine's context (:mod:`tsctl.models.prompt_fit`).

Each checkpoint is scored on each benchmark (:mod:`tsctl.evaluation.benchmark_scores`): ``eval.k`` samples per
problem with the ``engine`` settings (temperature, top_p, max_new_tokens; raise
``engine.max_new_tokens`` for benchmarks with long answers) and seed ``seed``, plus one greedy
response. Results go to the checkpoint's folder (a run's ``<run>/eval/step-N/``, else
``<runs_dir>/<experiment>/eval/<model folder name>/``)::

    <benchmark>.json            the result dict returned here: task, metrics, counts, sampling settings
    <benchmark>.parquet         every sampled and greedy response ("eval" shard, with .sha256 beside)

A run's checkpoints are scored on ``heldout`` only under the run's own ``task``
(:mod:`tsctl.evaluation.run_task`). A run may lie anywhere it is named (a copied or exported run), but one named inside
the runs folder must resolve inside it, and no results folder is written through a link out of its run or the runs
folder (:func:`tsctl.io.run_identity.write_place_problem`). Existing results are never replaced unless ``eval.overwrite=true``; every file is written atomically,
the JSON last, so a JSON file always has its samples beside it. Each results folder is held locked
(``.lock``) while it is written, so a second ``tsctl eval`` of the same checkpoint is refused at its start.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from tsctl.config.compose import Composed
from tsctl.config.schema import TsctlConfig
from tsctl.engines.factory import Policy, load_policy
from tsctl.evaluation.run_task import refuse_other_task
from tsctl.evaluation.benchmark_scores import score_suite
from tsctl.evaluation.suites import HELDOUT, Suite, fit_suites, load_suites, suites_demand
from tsctl.evaluation.targets import Target, resolve_targets
from tsctl.io import atomic
from tsctl.io.progress import console, make_progress
from tsctl.io.run_identity import write_place_problem
from tsctl.io.runs import RunError, held
from tsctl.io.shards import checksum_path, write_shard
from tsctl.models.loading import load_model
from tsctl.stages.warmup import base_model_path
from tsctl.tasks.registry import answer_hint
from tsctl.trainer.rollout import prompt_room


def evaluate(composed: Composed) -> list[dict[str, Any]]:
    """Score every checkpoint on every benchmark, write the results; one result dict per pair, checkpoint-major.

    Raises:
        ConfigError, DataError, RunError, ModelLoadError: a bad benchmark, checkpoint or data file,
            or results that exist already (without ``eval.overwrite``).
    """
    cfg = composed.cfg
    suites = load_suites(cfg)
    targets = resolve_targets(cfg, base_model_path)
    refuse_links_out(targets, cfg)
    refuse_other_task(targets, suites, cfg)
    refuse_existing(targets, suites, cfg.eval.overwrite)
    with contextlib.ExitStack() as stack:  # another tsctl eval writing the same results is refused now, not after its evaluation
        for out_dir in sorted({t.out_dir for t in targets}):
            stack.enter_context(held(out_dir, f"eval results in {out_dir} are being written by {{owner}} (another tsctl eval); wait for "
                                     "it to end, then rerun (with eval.overwrite=true to replace what it wrote)", make=True))
        refuse_existing(targets, suites, cfg.eval.overwrite)  # again, holding them
        return _score_all(cfg, suites, targets)


def _score_all(cfg: TsctlConfig, suites: list[Suite], targets: list[Target]) -> list[dict[str, Any]]:
    """Every target scored on every suite, written (:func:`evaluate_one`); the results, checkpoint-major."""
    for suite in suites:
        if suite.skipped:
            console.print(f"[yellow]{suite.name}: skipped {suite.skipped} malformed rows[/yellow] (on_bad_row=skip)")
    results = []
    fitted: list[Suite] | None = None
    with make_progress() as progress:
        bar = progress.add_task("eval", total=len(targets) * len(suites), status="")
        for target, policy in policies(targets, cfg, suites):
            if fitted is None:  # the targets share a tokenizer and an engine
                fitted = fit_suites(suites, policy.formatter, prompt_room(cfg, policy.engine))
            for suite in fitted:
                progress.update(bar, status=f"{target.label} / {suite.name}")
                results.append(evaluate_one(policy, target, suite, cfg))
                if results[-1]["answer_found"] == 0:
                    console.print(f"[yellow]note:[/yellow] {no_answer(target, suite, cfg)}", highlight=False, soft_wrap=True)
                progress.advance(bar)
            console.print(f"results of {target.label}: {target.out_dir}")
    return results


def no_answer(target: Target, suite: Suite, cfg: TsctlConfig) -> str:
    """Why every score of ``target`` on ``suite`` is 0 when none of its sampled responses states a final answer."""
    hint = answer_hint(cfg.task.name) if suite.name == HELDOUT else (
        f"the benchmark's instruction (conf/benchmark/{suite.name}.yaml) asks for one, and this model does not follow it"
    )
    return f"{target.label} / {suite.name}: no sampled response states a final answer the grader can read, so every score is 0; {hint}"


def result_paths(target: Target, benchmark: str) -> tuple[Path, Path]:
    """The ``.json`` and ``.parquet`` files of ``target`` on ``benchmark``."""
    return target.out_dir / f"{benchmark}.json", target.out_dir / f"{benchmark}.parquet"


def refuse_links_out(targets: Sequence[Target], cfg: TsctlConfig) -> None:
    """Raise RunError where a target's results folder would be written through a link out of its run (a run's
    ``eval/step-N``) or out of the runs folder (any other model's), or where a run named inside the runs folder leads
    out of it (:func:`tsctl.io.run_identity.write_place_problem`)."""
    runs = Path(cfg.runs_dir)
    for target in targets:
        folder = target.out_dir.parents[1] if target.step is not None else runs  # <run>/eval/step-N, or under the runs folder
        if (found := write_place_problem(folder, target.out_dir, runs)) is not None:
            raise RunError(found)


def refuse_existing(targets: Sequence[Target], suites: Sequence[Suite], overwrite: bool) -> None:
    """Raise RunError when any result file would be replaced and ``overwrite`` is off."""
    if overwrite:
        return
    files = [path for t in targets for s in suites for path in result_paths(t, s.name)]
    existing = [path for path in files + [checksum_path(p) for p in files] if path.exists()]
    if existing:
        more = f" and {len(existing) - 1} more file(s)" if len(existing) > 1 else ""
        raise RunError(f"eval results already exist: {existing[0]}{more}; rerun with eval.overwrite=true to replace them")


def policies(targets: Sequence[Target], cfg: TsctlConfig, suites: Sequence[Suite]) -> Iterator[tuple[Target, Policy]]:
    """Each target with a policy holding its weights: the first is loaded, later ones are copied into it.

    One model and one engine serve all targets (a vLLM engine is started once, sized for ``suites``); the targets of
    one call share an architecture and tokenizer (one model, or the checkpoints of one run).
    """
    policy: Policy | None = None
    for target in targets:
        if policy is None:
            policy = load_policy(cfg, target.path, target.key, demand=lambda formatter: suites_demand(suites, formatter, cfg))
        else:
            policy.model.load_state_dict(load_model(target.path, cfg.model.dtype, cfg.model.device, key=target.key)[0].state_dict())
            policy.engine.load_weights(policy.model.state_dict())
        yield target, policy


def evaluate_one(policy: Policy, target: Target, suite: Suite, cfg: TsctlConfig) -> dict[str, Any]:
    """Score ``target`` on ``suite``, write its samples then its result JSON; return the result."""
    start = time.perf_counter()
    metrics, samples = score_suite(policy.model, policy.engine, policy.formatter, suite, cfg)
    e = cfg.engine
    result = {
        "checkpoint": target.label,
        "checkpoint_path": target.path,
        "step": target.step,
        "benchmark": suite.name,
        "task": suite.task.name,
        "problems": len(suite.problems),
        "skipped_rows": suite.skipped,
        "too_long_prompts": suite.too_long,
        "k": cfg.eval.k,
        **metrics,
        "sampling": {"temperature": e.temperature, "top_p": e.top_p, "max_new_tokens": e.max_new_tokens, "seed": cfg.seed},
        "seconds": time.perf_counter() - start,
    }
    json_path, parquet_path = result_paths(target, suite.name)
    target.out_dir.mkdir(parents=True, exist_ok=True)
    metadata = {"checkpoint": target.path, "benchmark": suite.name, "task": suite.task.name}
    write_shard(parquet_path, "eval", samples, metadata, overwrite=cfg.eval.overwrite)
    atomic.write_json(json_path, result)
    return result
