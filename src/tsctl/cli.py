"""The ``tsctl`` command line: parse, compose the config, call a stage. No logic of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import typer
from omegaconf import OmegaConf
from rich.markup import escape
from typer.core import TyperCommand

from tsctl.config.compose import Composed
from tsctl.config.errors import ConfigError, EnvSettingError
from tsctl.io.progress import console


def knobs() -> str:
    """The help's list of knobs, with each registry's names (this imports the registries, so it is built only
    when a help is shown: :class:`_WithKnobs`)."""
    from tsctl.algo.advantages import ADVANTAGES
    from tsctl.algo.aggregations import AGGREGATIONS
    from tsctl.algo.divergences import DIVERGENCES
    from tsctl.algo.losses import POLICY_LOSSES
    from tsctl.algo.rollout_correction import CORRECTIONS
    from tsctl.algo.stale_masks import STALE_MASKS
    from tsctl.engines.registry import ENGINES
    from tsctl.seeds.selectors import SELECTORS
    from tsctl.seeds.truncation import STRATEGIES
    from tsctl.tasks.registry import TASKS

    return f"""
[bold]Overrides[/bold] are Hydra's KEY=VALUE after the command, e.g. [cyan]ratio=25 refresh=10 trainer.steps=50[/cyan].

[bold]Sweep knobs[/bold] (top level): [cyan]ratio[/cyan] (% of each group seeded, 0 = plain DAPO),
[cyan]truncation[/cyan] ({"|".join(STRATEGIES.names())}), [cyan]refresh[/cyan] (T, steps between
behaviour-policy refreshes; 0 = one window: the initial model writes every step's seeds), [cyan]seed[/cyan].

[bold]Groups[/bold] (choose with group=option, tune with group.key=value):
[cyan]model[/cyan] (path=builtin|<HF folder>|<hub id>, tiny.*, warmup.*), [cyan]task[/cyan] ({"|".join(TASKS.names())}; overlong_prompts=error|drop, heldout_overlap=error|allow, reward=correct|random|format, reward_p),
[cyan]engine[/cyan] ({"|".join(ENGINES.names())}: temperature, top_p, max_new_tokens; vllm.*: dtype, max_model_len, gpu_memory_utilization, enable_sleep_mode, enforce_eager), [cyan]algo[/cyan] (dapo|grpo: loss={"|".join(AGGREGATIONS.names())}, clip_low, clip_high,
clip_c, prefix_clip_c, kl_coef, kl_type={"|".join(DIVERGENCES.names())}, dynamic_sampling, overlong, rollout_correction=none|{"|".join(CORRECTIONS.names())}, stale_mask=none|{"|".join(STALE_MASKS.names())},
policy_loss={"|".join(POLICY_LOSSES.names())}, adv_estimator={"|".join(ADVANTAGES.names())}; an entry's own settings: algo.<name>.*), [cyan]seeds[/cyan] (truncation parameters, train_prefix, adv_group,
selector={"|".join(SELECTORS.names())}, pool_size, source=self|model|traces, source_path, trace_logprobs=exclude|cap|shaping, shaping_gamma),
[cyan]trainer[/cyan] (default|micro: steps, batch_size, n, mini_batches, lr, save_every, eval_every, nonfinite, checkpoint_on_signal),
[cyan]eval[/cyan] (checkpoint, step, benchmarks, k, pass_k, limit, on_bad_row, overwrite),
[cyan]shards[/cyan] (seed/rollout: checkpoint, step, data_step, steps, out_dir, overwrite), [cyan]logger[/cyan] (console|wandb).

[bold]Presets[/bold] set a whole paper-like run: [cyan]+preset=qwen2.5-math-1.5b[/cyan] or [cyan]+preset=qwen2.5-math-7b[/cyan] (conf/preset/).

Print the resolved config with [cyan]--cfg job[/cyan]; every key is documented in src/tsctl/config/schema/.
"""


class _WithKnobs(TyperCommand):
    """A command whose help ends with :func:`knobs`, built when the help is shown (not when any command starts)."""

    epilog = property(lambda self: knobs(), lambda self, value: None)


app = typer.Typer(
    name="tsctl",
    help="Experiments in RL of language models with Thinking Seeds (DAPO/GRPO with self-generated prefixes).",
    no_args_is_help=True,
    rich_markup_mode="rich",
    add_completion=False,
    pretty_exceptions_enable=False,
)

Overrides = typer.Argument(None, help="Hydra overrides KEY=VALUE (see below).", show_default=False)
CfgFlag = typer.Option(None, "--cfg", help="Print the resolved config ('job') and exit.", show_default=False)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are a user's mistake (or the machine's: a full disk): printed as one line, never as a traceback."""
    from tsctl.io.atomic import WriteError
    from tsctl.io.checkpoints import DamagedCheckpoint
    from tsctl.io.runs import RunError
    from tsctl.io.shards import ShardError
    from tsctl.io.sinks import LoggerError
    from tsctl.models.loading import ModelLoadError
    from tsctl.tasks.records import DataError
    from tsctl.trainer.nonfinite import NonFiniteError

    return (ConfigError, EnvSettingError, ModelLoadError, RunError, ShardError, DataError, NonFiniteError, WriteError, DamagedCheckpoint,
            LoggerError, FileNotFoundError)


def _fail(err: BaseException) -> typer.Exit:
    """Print ``err`` as the one ``error:`` line; the exit code 2 to raise."""
    console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def _guarded(action: Callable[[], object]) -> None:
    """Run ``action``; user errors and file-system errors (a full disk, a read-only place, a path through a file, ...)
    exit 2 with one line."""
    from tsctl.io.atomic import write_error, write_problem
    from tsctl.io.os_errors import one_line
    from tsctl.trainer.stop_signals import Interrupted, StartInterrupted

    try:
        action()
    except _user_errors() as err:
        raise _fail(err) from None
    except OSError as err:
        code = write_problem(err)
        raise _fail(write_error(code, err.filename or "the output folder") if code is not None else OSError(one_line(err))) from None
    except KeyboardInterrupt:
        # A run's step loop turns Ctrl-C into Interrupted (below); this is Ctrl-C before it or in another command.
        console.print("[yellow]interrupted[/yellow]; rerun the same command (with resume=true if its run folder exists)")
        raise typer.Exit(130) from None
    except StartInterrupted as stop:  # SIGTERM/SIGINT during a run's start: nothing trained, a new run's folder removed
        console.print(f"[yellow]interrupted[/yellow] by {escape(str(stop))}", highlight=False, soft_wrap=True)
        raise typer.Exit(stop.exit_code) from None
    except Interrupted as stop:  # SIGTERM/SIGINT at a step's end: saved and marked, see tsctl.trainer.stop_signals
        from tsctl.distributed.world import from_env

        if from_env().main:  # under torchrun: once, by rank 0
            console.print(f"[yellow]interrupted[/yellow] by {escape(str(stop))}", highlight=False, soft_wrap=True)
        raise typer.Exit(stop.exit_code) from None


def quote_baseline(overrides: list[str]) -> list[str]:
    """``report.baseline=ratio=0`` as Hydra needs it (``report.baseline='ratio=0'``): its value holds ``=``."""
    key = "report.baseline="
    return [
        f"{key}'{o[len(key):]}'" if o.startswith(key) and o[len(key):][:1] not in ("'", '"') else o
        for o in overrides
    ]


def _run(command: str, overrides: Optional[list[str]], cfg_flag: Optional[str], stage: Callable[[Composed], object], idle: bool = True) -> None:
    """Compose ``tsctl COMMAND``'s config, print it if asked, else run ``stage``; user errors exit 2 with one line. ``idle``
    refuses settings that cannot take effect (:mod:`tsctl.runconfig.idle`; a sweep checks all its points instead); overrides
    the command would ignore are refused too (:mod:`tsctl.config.overrides`)."""

    def action() -> None:
        from tsctl.runconfig import compose_config  # the packages' registries: imported only to run a command

        composed = compose_config(quote_baseline(overrides or []), idle=idle, command=command)
        if cfg_flag:
            if cfg_flag != "job":
                raise ConfigError("--cfg", f"unknown value {cfg_flag!r}; use --cfg job")
            from tsctl.engines.factory import unread_keys

            typer.echo(OmegaConf.to_yaml(composed.node))
            if unread := unread_keys(composed.cfg.engine.name):
                typer.echo(f"# engine={composed.cfg.engine.name} does not read {', '.join(unread)}")
            return
        from tsctl.engines.factory import check_runs_here

        check_runs_here(composed.cfg.engine)  # before any run folder is made
        stage(composed)

    _guarded(action)


LOOSE = {"ignore_unknown_options": True}
"""Options a command does not know reach it as overrides, so that ``--multirun`` is refused in one line that names ``tsctl ablate``."""


@app.command(cls=_WithKnobs, context_settings=LOOSE)
def warmup(overrides: Optional[list[str]] = Overrides, cfg: Optional[str] = CfgFlag, rebuild: bool = typer.Option(False, help="Build anew even if a cached model exists.")) -> None:
    """Build the tiny built-in model and warm it up on the task's worked solutions (cached under runs/_models/)."""

    def stage(c: Composed) -> None:
        from tsctl.stages.warmup import warmup as run_warmup

        path, report = run_warmup(c.cfg, rebuild=rebuild)
        console.print(f"model: {path}\nheld-out greedy accuracy: {report['heldout_accuracy']:.3f} on {report['heldout_problems']} problems; warm-up {report['train_seconds']:.0f}s")

    _run("warmup", overrides, cfg, stage)


@app.command(cls=_WithKnobs, context_settings=LOOSE)
def train(overrides: Optional[list[str]] = Overrides, cfg: Optional[str] = CfgFlag) -> None:
    """Run the RL loop (DAPO; Thinking Seeds when ratio > 0) into runs/<experiment>/<name>/."""

    def stage(c: Composed) -> None:
        from tsctl.distributed.world import from_env
        from tsctl.stages.train import train as run_train

        run = run_train(c)
        if from_env().main:  # under torchrun: once, by rank 0
            console.print(f"run complete: {run.path}  (metrics in {run.metrics_file})")

    _run("train", overrides, cfg, stage)


@app.command(cls=_WithKnobs, context_settings=LOOSE)
def seed(overrides: Optional[list[str]] = Overrides, cfg: Optional[str] = CfgFlag) -> None:
    """Write a seed shard: a behaviour checkpoint's full responses, log-probs and cut points for train's prompts (ratio > 0)."""

    def stage(c: Composed) -> None:
        from tsctl.stages.seed import seed as run_seed

        run_seed(c)

    _run("seed", overrides, cfg, stage)


@app.command(cls=_WithKnobs, context_settings=LOOSE)
def rollout(overrides: Optional[list[str]] = Overrides, cfg: Optional[str] = CfgFlag) -> None:
    """Continue a seed shard with the current policy, add plain samples, grade them and write a rollout shard."""

    def stage(c: Composed) -> None:
        from tsctl.stages.rollout import rollout as run_rollout

        run_rollout(c)

    _run("rollout", overrides, cfg, stage)


@app.command(name="eval", cls=_WithKnobs, context_settings=LOOSE)
def eval_(overrides: Optional[list[str]] = Overrides, cfg: Optional[str] = CfgFlag) -> None:
    """Score checkpoints on benchmarks (greedy accuracy, pass@k, entropy, length) into eval/ folders and a table."""

    def stage(c: Composed) -> None:
        from tsctl.evaluation.table import print_results
        from tsctl.stages.eval import evaluate

        print_results(evaluate(c), console)

    _run("eval", overrides, cfg, stage)


@app.command(cls=_WithKnobs, context_settings=LOOSE)
def ablate(overrides: Optional[list[str]] = Overrides, cfg: Optional[str] = CfgFlag) -> None:
    """Sweep any keys with Hydra multirun (e.g. ratio=0,25,50 seed=1,2,3): one train + final eval per point, then a report.

    Points go to runs/<experiment>/sweep-<hash>/<point>/ (or name=<sweep>); rerunning skips completed points and resumes interrupted ones.

    Launchers: sequential by default; hydra/launcher=joblib hydra.launcher.n_jobs=N for parallel points; hydra/launcher=submitit_slurm for Slurm (see src/tsctl/stages/ablate/__init__.py).
    """

    def stage(c: Composed) -> None:
        from tsctl.stages.ablate import ablate as run_ablate

        folder, failed = run_ablate(quote_baseline(overrides or []))
        console.print(f"sweep: {folder}  (report in {folder / 'report'})", highlight=False)
        if failed:
            console.print(f"[red]{len(failed)} run(s) failed:[/red] {', '.join(failed)}; rerun the same command to retry them", highlight=False)
            raise typer.Exit(1)

    from tsctl.stages.ablate import first_point

    _run("ablate", first_point(overrides or []), cfg, stage, idle=False)


REPORT_EXAMPLES = """
[bold]Examples[/bold]:
[cyan]tsctl report runs/default/sweep-<id>[/cyan]  (tables and plots into <sweep>/report/),
[cyan]tsctl report runs/default/sweep-<id> report.baseline=ratio=25[/cyan]  (compare every point with ratio=25),
[cyan]tsctl report runs/default/ratio0-seed0[/cyan]  (one run's plots into its plots/).

It reads what the runs wrote and trains nothing, so it takes no other override and no --cfg.
"""


@app.command(epilog=REPORT_EXAMPLES)
def report(
    path: str = typer.Argument(..., help="A sweep folder (runs/<experiment>/<sweep>) or one run folder.", show_default=False),
    overrides: Optional[list[str]] = typer.Argument(None, help="report.baseline=KEY=VALUE (the point others are compared with; default: the first value of the first swept key), report.level=0.95.", show_default=False),
) -> None:
    """Summary tables (mean, std and confidence intervals over seeds), paired comparisons against a baseline with
    verdicts, and plots of a sweep or a run, into <sweep>/report/ or <run>/plots/."""

    def stage(c: Composed) -> None:
        from tsctl.analysis.points import is_run_folder
        from tsctl.analysis.report import report as write_report
        from tsctl.io.run_identity import write_place_problem
        from tsctl.io.runs import RunError

        folder = Path(path)
        if (found := write_place_problem(folder, folder / ("plots" if is_run_folder(folder) else "report"), Path(c.cfg.runs_dir))) is not None:
            raise RunError(found)
        out = write_report(folder, baseline=c.cfg.report.baseline, level=c.cfg.report.level, equivalence_margin=c.cfg.report.equivalence_margin)
        console.print(f"report: {out}", highlight=False)

    other = [o for o in overrides or [] if not o.lstrip("+~").startswith("report.")]
    if other:
        raise _fail(ConfigError("overrides", f"tsctl report reads what the runs wrote and takes only report.* overrides (got {' '.join(other)}); "
                                "drop them (report.baseline=<key>=<value> chooses the point the others are compared with)"))
    _run("report", overrides, None, stage)
