"""``tsctl ablate``: one ``train`` plus a final held-out evaluation per sweep point, via Hydra multirun.

Any Hydra sweep syntax over any keys works: ``tsctl ablate ratio=0,25,50 refresh=5,20 seed=1,2,3``
(also ``range(...)``, ``glob(...)`` and group choices such as ``truncation=uniform,entropy``).
A sweep of keys only Thinking Seeds reads (``truncation``, ``refresh``, ``seeds.*``) in which no point
has ``ratio > 0`` is refused: its points would all be one plain DAPO run. So is any setting that cannot
take effect at any point (:mod:`tsctl.runconfig.idle`; one that some point reads, as ``refresh=5`` in ``ratio=0,25``, is kept),
and two points that compose to the same run (:mod:`tsctl.stages.ablate.plan`). Layout of one sweep::

    <runs_dir>/<experiment>/<sweep>/             sweep-<hash of the points>, or name=<sweep>
      multirun.yaml                              Hydra's record of the sweep
      <point>/                                   one run folder per point, e.g. ratio=25-seed=1
        config.yaml manifest.json metrics.jsonl checkpoints/ seeds/   as for `tsctl train`
        final_eval.json                          held-out greedy accuracy and pass@k of the final checkpoint
        .hydra/overrides.yaml                    the point's overrides, written when it starts
      report/                                    summary.md, summary.csv and the plots (`tsctl report`)

A point's folder name joins its swept ``key=value`` pairs with ``-``. Running the same sweep again
(same points, in any order) finds the same folder: completed points are skipped, interrupted or
failed ones resume from their newest checkpoint, each only where what it ran is what this command would
run; otherwise the sweep is refused before any point starts, naming each changed key
(:mod:`tsctl.stages.ablate.existing`). A completed point's files are never written again. Without ``name=``
the first line says whether the sweep starts a new folder and how to add its points to an existing one.
A failing point is recorded as ``failed`` in its manifest and the others go on; the summary lists it.

One sweep, one ``tsctl ablate`` at a time: the command holds the sweep folder's lock (``.lock``,
:mod:`tsctl.io.run_lock`) while it trains and reports, and a second one on the same sweep is refused
in one line. A point's files are written only under that point's own lock (its training, its final
evaluation, and the ``failed`` mark of its error handler), so a ``tsctl train ... resume=true`` run
by hand on a point at the same time cannot be marked failed or overwritten by the sweep.

Launchers (Hydra plugins; choose with ``hydra/launcher=...``):

- sequential (Hydra's ``basic`` launcher): the default, one point after another in this process;
- ``hydra/launcher=joblib hydra.launcher.n_jobs=2``: points in parallel processes on one machine, each
  pinned to its own GPU and to cores // n_jobs CPU threads for its whole run
  (``TSCTL_THREADS_PER_JOB`` to choose; :mod:`tsctl.distributed.job_pinning`); mind memory: each
  point loads its own model;
- ``hydra/launcher=submitit_slurm`` (``pip install hydra-submitit-launcher``): one Slurm job per point,
  e.g. ``hydra.launcher.partition=gpu hydra.launcher.gpus_per_node=1 hydra.launcher.timeout_min=240``;
  ``runs_dir`` must be on a file system the nodes share. The summary is written when all jobs end;
  ``tsctl report <sweep>`` redraws it at any time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Iterator

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from tsctl.analysis.points import FINAL_EVAL, POINT_SEP, is_done
from tsctl.config.compose import Composed
from tsctl.config.overrides import check_overrides
from tsctl.config.schema import TsctlConfig
from tsctl.config.store import conf_dir, register_schema
from tsctl.distributed.job_pinning import POINTS_ENV, parallel_jobs, pin_job
from tsctl.io import atomic, faults, rounding
from tsctl.io.progress import console
from tsctl.io.run_identity import outside_runs
from tsctl.io.runs import RunDir, RunError, held
from tsctl.io.sinks import check_logger
from tsctl.runconfig import checked, compose_config
from tsctl.runconfig.registries import schema
from tsctl.trainer.data_checks import check_final_eval_data
from tsctl.stages.ablate.existing import announce, refuse_changed
from tsctl.stages.ablate.plan import LOCATION_KEYS, LONE_POINT, Sweep, expand, first_point, fixed_keys, is_report_override, plan, sweep_name

__all__ = [
    "LOCATION_KEYS", "Sweep", "ablate", "expand", "first_point", "is_report_override", "plan", "point_task",
    "sweep_name",
]

OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"
"""A point's overrides, as Hydra records them (``tsctl report`` labels points by them); written once, when the point starts."""


def _quote(text: str) -> str:
    """A Hydra-quoted string value."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_argv(sweep: Sweep) -> list[str]:
    """Command line of the Hydra multirun: the user's overrides, then where and how to write each point."""
    fixed = fixed_keys(sweep.task_overrides, sweep.swept)
    subdir = "${hydra.job.override_dirname}" if sweep.swept else LONE_POINT
    return [
        "tsctl-ablate",
        "--multirun",
        *sweep.task_overrides,
        *sweep.hydra_overrides,
        f"hydra.sweep.dir={_quote(str(sweep.path))}",
        f"hydra.sweep.subdir={subdir}",
        f"hydra.job.config.override_dirname.exclude_keys=[{','.join(fixed)}]",
        f"hydra.job.config.override_dirname.item_sep={_quote(POINT_SEP)}",
        "hydra.output_subdir=null",  # a point's overrides are written by run_point, once: a completed point is never rewritten
        "hydra/job_logging=none",
        "hydra/hydra_logging=none",
    ]


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    """Temporarily replace ``sys.argv`` (Hydra's entry point parses it)."""
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _points_env(points: int) -> Iterator[None]:
    """``TSCTL_SWEEP_POINTS`` set for the sweep's parallel workers to inherit (distributed.job_pinning), as it was after."""
    saved = os.environ.get(POINTS_ENV)
    os.environ[POINTS_ENV] = str(points)
    try:
        yield
    finally:
        if saved is None:
            del os.environ[POINTS_ENV]
        else:
            os.environ[POINTS_ENV] = saved


def launch(sweep: Sweep) -> None:
    """Run every point through Hydra multirun with the chosen launcher."""
    register_schema(schema())
    with _points_env(len(sweep.points)), _argv(hydra_argv(sweep)):
        hydra_point()


def ablate(overrides: list[str]) -> tuple[Path, list[str]]:
    """Plan and run the sweep, then write its report; returns the sweep folder and its failed runs.

    Before any point starts, under the sweep's lock, the points its folder holds are checked against this
    command's (:func:`tsctl.stages.ablate.existing.refuse_changed`).
    """
    from tsctl.analysis.report import find_runs, report

    check_overrides(overrides, "ablate")
    options = compose_config([o for o in overrides if is_report_override(o)]).cfg.report
    sweep = plan([o for o in overrides if not is_report_override(o)])
    for node in sweep.nodes:
        check_logger(OmegaConf.to_object(node.logger))  # what would stop wandb, before any folder (it fails each point otherwise)
    for task in {OmegaConf.to_yaml(node.task): node.task for node in sweep.nodes}.values():
        check_final_eval_data(OmegaConf.to_object(task))  # every point's end is scored on held-out problems, before any trains
    if (outside := outside_runs(sweep.path, Path(sweep.nodes[0].runs_dir))) is not None:
        raise RunError(f"sweep {outside}")
    fresh = not sweep.path.is_dir()
    with atomic.writing(sweep.path):
        sweep.path.mkdir(parents=True, exist_ok=True)
    with held(sweep.path, f"sweep {sweep.path} is in use by {{owner}} (another `tsctl ablate` of it); wait for that one to "
              "end (or stop it), then rerun this command: completed points are skipped"):
        faults.hit("sweep-locked")
        refuse_changed(sweep)
        console.print(announce(sweep, fresh), highlight=False, soft_wrap=True)
        launch(sweep)
        report(sweep.path, baseline=options.baseline, level=options.level, equivalence_margin=options.equivalence_margin)
    failed = [run.path.name for run in find_runs(sweep.path) if run.status != "completed"]
    return sweep.path, failed


def point_task(node: DictConfig) -> None:
    """Hydra's task function: one point, in the folder Hydra chose for it (a module-level function, so the
    joblib launcher sends it to its workers by name, not by value)."""
    hydra_cfg = HydraConfig.get()
    folder = Path(hydra_cfg.runtime.output_dir)
    points = int(os.environ.get(POINTS_ENV, "1"))
    pinning = pin_job(parallel_jobs(hydra_cfg.launcher, points), folder.parent)
    if pinning is not None:
        gpu = f", GPU {pinning.gpu}" + (" (shared: more parallel points than GPUs)" if pinning.shares else "") if pinning.gpu else ""
        console.print(f"point {folder.name}: {pinning.threads} CPU thread(s){gpu}", highlight=False)
    run_point(node, folder, list(hydra_cfg.overrides.task))


hydra_point = hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(point_task)
"""The multirun entry point :func:`launch` calls (it parses ``sys.argv``)."""


def point_config(node: DictConfig, folder: Path) -> Composed:
    """The point's config, placed in ``folder`` (``<runs_dir>/<experiment>/<sweep>/<point>``), resuming when it exists."""
    node = node.copy()
    node.experiment = f"{node.experiment}/{folder.parent.name}"
    node.name = folder.name
    node.resume = (folder / "config.yaml").is_file()  # a new point starts; resume=true of nothing is an error
    cfg = OmegaConf.to_object(node)
    assert isinstance(cfg, TsctlConfig)
    return checked(node, cfg)


def _shell_override(key: str, value: str) -> str:
    """``key=value`` as one shell word that Hydra reads back as the string ``value`` (quoted when needed)."""
    if re.fullmatch(r"[\w./-]+", value):
        return f"{key}={value}"
    return f'"{key}={_quote(value)}"'


def train_argv(overrides: list[str], cfg: TsctlConfig) -> list[str]:
    """``tsctl train`` command line that trains (or resumes) the point on its own, as its manifest records it."""
    own = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in LOCATION_KEYS]
    place = [_shell_override(key, str(getattr(cfg, key))) for key in ("runs_dir", "experiment", "name")]
    return ["tsctl", "train", *own, *place, "resume=true"]


def run_point(node: DictConfig, folder: Path, overrides: list[str]) -> None:
    """Train (or resume) one point and evaluate its final checkpoint; a failure is recorded, not raised.

    Training holds the point's lock itself (:func:`tsctl.stages.train.train`); the final evaluation and
    the record of a failure take it here, and a failure while another process holds it (a point being
    trained by hand) is reported but leaves that process's manifest alone.
    """
    from tsctl.models.loading import resolve_device
    from tsctl.stages.train import train

    run = RunDir(folder)
    if is_done(run):
        console.print(f"point {folder.name}: completed, skipped", highlight=False)
        return
    console.print(f"point {folder.name}: {'resuming' if run.manifest() else 'starting'}", highlight=False)
    busy = f"point {folder} is in use by {{owner}}; wait for it to end, then rerun the sweep"
    try:
        composed = point_config(node, folder)
        if not (folder / OVERRIDES_FILE).is_file():
            with held(folder, busy):
                atomic.write_text(folder / OVERRIDES_FILE, OmegaConf.to_yaml(OmegaConf.create(overrides)))
        if run.manifest().get("status") != "completed":
            with _argv(train_argv(overrides, composed.cfg)):
                train(composed)
        with held(folder, busy), rounding.threads_kept():  # the final checkpoint is scored at the threads the run trained with
            rounding.resume_as_started(run.manifest().get("arithmetic"), resolve_device(composed.cfg.model.device), doing="evaluating")
            write_final_eval(composed.cfg, run)
            if composed.cfg.logger.name == "wandb":
                publish(composed, run)
    except Exception as err:
        console.print(f"[red]point {folder.name} failed[/red]\n{traceback.format_exc()}", highlight=False)
        holder = run.mark_failed(f"{type(err).__name__}: {err}")
        if holder is not None:
            console.print(f"point {folder.name}: not marked failed, {holder} holds it", highlight=False)


def final_eval(cfg: TsctlConfig, run: RunDir) -> dict[str, Any]:
    """The held-out evaluation of the run's final checkpoint (:func:`tsctl.evaluation.scoring.final_eval`)."""
    from dataclasses import replace

    from tsctl.engines.factory import load_policy, task_demand
    from tsctl.evaluation.scoring import final_eval as score_final
    from tsctl.io.checkpoints import latest_checkpoint
    from tsctl.trainer.rollout import servable_task

    found = latest_checkpoint(run.checkpoints)
    if found is None:
        raise RunError(f"{run.path} has no checkpoint to evaluate")
    step, path = found
    tr, limit = cfg.trainer, cfg.eval.limit
    requests = max(limit or tr.eval_problems, (limit or tr.eval_samples_problems) * cfg.eval.k)  # greedy, then the sampled ones
    policy = load_policy(cfg, str(path), demand=lambda formatter: replace(task_demand(cfg, formatter), requests=requests))
    return score_final(policy.engine, policy.formatter, servable_task(cfg, policy.formatter, policy.engine), cfg, step)


def write_final_eval(cfg: TsctlConfig, run: RunDir) -> None:
    """Evaluate the final checkpoint and store ``final_eval.json`` in the run folder."""
    atomic.write_json(run.path / FINAL_EVAL, final_eval(cfg, run))


def publish(composed: Composed, run: RunDir) -> None:
    """Reopen the run's wandb run: final evaluation in its summary, the run's plots as images."""
    from tsctl.analysis.report import report
    from tsctl.io.sinks import MetricsSink

    sink = MetricsSink(run, composed.cfg.logger, composed.node)
    try:
        final = json.loads((run.path / FINAL_EVAL).read_text())
        sink.wandb.summary.update({f"final/{k}": v for k, v in final.items()})
        report(run.path, echo=False)
    finally:
        sink.close()
