"""The ``tsctl`` command line: parse, compose the config, call a stage. No logic of its own."""

from __future__ import annotations

from typing import Callable, Optional

import typer
from omegaconf import OmegaConf

from tsctl.config.compose import Composed, compose_config
from tsctl.config.errors import ConfigError
from tsctl.progress import console

KNOBS = """
[bold]Overrides[/bold] are Hydra's KEY=VALUE after the command, e.g. [cyan]ratio=25 refresh=10 trainer.steps=50[/cyan].

[bold]Sweep knobs[/bold] (top level): [cyan]ratio[/cyan] (% of each group seeded, 0 = plain DAPO),
[cyan]truncation[/cyan] (fixed|uniform|boundary|entropy|schedule), [cyan]refresh[/cyan] (T, steps between
behaviour-policy refreshes; 0 = never), [cyan]seed[/cyan].

[bold]Groups[/bold] (choose with group=option, tune with group.key=value):
[cyan]model[/cyan] (path=builtin|<HF folder>|<hub id>, tiny.*, warmup.*), [cyan]task[/cyan] (countdown|arithmetic|file),
[cyan]engine[/cyan] (hf|vllm: temperature, top_p, max_new_tokens), [cyan]algo[/cyan] (dapo|grpo: clip_low, clip_high,
clip_c, kl_coef, dynamic_sampling, overlong), [cyan]seeds[/cyan] (truncation parameters, train_prefix, adv_group),
[cyan]trainer[/cyan] (default|micro: steps, batch_size, n, mini_batches, lr, save_every, eval_every),
[cyan]eval[/cyan] (benchmarks, k, pass_k, limit), [cyan]logger[/cyan] (console|wandb).

Print the resolved config with [cyan]--cfg job[/cyan]; every key is documented in src/tsctl/config/schema.py.
"""

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
    """Exceptions that are a user's mistake: printed as one line, never as a traceback."""
    from tsctl.models.loading import ModelLoadError
    from tsctl.runs import RunError
    from tsctl.seeds.shards import ShardError
    from tsctl.tasks.records import DataError

    return (ConfigError, ModelLoadError, RunError, ShardError, DataError, FileNotFoundError)


def _run(overrides: Optional[list[str]], cfg_flag: Optional[str], stage: Callable[[Composed], object]) -> None:
    """Compose the config, print it if asked, else run ``stage``; user errors exit 2 with one line."""
    try:
        composed = compose_config(overrides or [])
        if cfg_flag:
            if cfg_flag != "job":
                raise ConfigError("--cfg", f"unknown value {cfg_flag!r}; use --cfg job")
            typer.echo(OmegaConf.to_yaml(composed.node))
            return
        stage(composed)
    except _user_errors() as err:
        console.print(f"[red]error:[/red] {err}", highlight=False)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]; resume with the same command and resume=true")
        raise typer.Exit(130) from None


@app.command(epilog=KNOBS)
def warmup(overrides: Optional[list[str]] = Overrides, cfg: Optional[str] = CfgFlag, rebuild: bool = typer.Option(False, help="Build anew even if a cached model exists.")) -> None:
    """Build the tiny built-in model and warm it up on the task's worked solutions (cached under runs/_models/)."""

    def stage(c: Composed) -> None:
        import json

        from tsctl.models.builtin import WARMUP_REPORT, ensure_builtin

        path = ensure_builtin(c.cfg, rebuild=rebuild)
        report = json.loads((path / WARMUP_REPORT).read_text())
        console.print(f"model: {path}\nheld-out greedy accuracy: {report['heldout_accuracy']:.3f} on {report['heldout_problems']} problems; warm-up {report['train_seconds']:.0f}s")

    _run(overrides, cfg, stage)


@app.command(epilog=KNOBS)
def train(overrides: Optional[list[str]] = Overrides, cfg: Optional[str] = CfgFlag) -> None:
    """Run the RL loop (DAPO; Thinking Seeds when ratio > 0) into runs/<experiment>/<name>/."""

    def stage(c: Composed) -> None:
        from tsctl.train import train as run_train

        run = run_train(c)
        console.print(f"run complete: {run.path}  (metrics in {run.metrics_file})")

    _run(overrides, cfg, stage)

