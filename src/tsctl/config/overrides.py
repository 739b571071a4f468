"""Overrides that a command would accept and then ignore, refused before its config is composed.

Hydra parses every ``KEY=VALUE`` after a command, so some would pass composition and change nothing:

- an option such as ``--multirun`` (``-m``): one command runs one config; a sweep is ``tsctl ablate``;
- a sweep of several values (``ratio=0,25``, ``seed=range(3)``): the same;
- a Hydra setting (``hydra.run.dir=...``, ``hydra/launcher=joblib``): tsctl composes configs with Hydra but
  runs a Hydra job only under ``tsctl ablate``, which takes Hydra's launcher settings alone (it places the
  sweep and plans its points itself: :data:`ABLATE_HYDRA`);
- a key the command never reads (:data:`READ_BY`): ``shards.*`` outside ``tsctl seed`` and ``tsctl rollout``,
  the checkpoint and benchmark choice of ``tsctl eval`` elsewhere, ``report.*`` outside ``tsctl ablate`` and
  ``tsctl report``, ``resume`` outside ``tsctl train``, the training reward's control ``task.reward``/``task.reward_p``
  outside ``tsctl train``, ``tsctl rollout`` and ``tsctl ablate`` (the others grade correctness).

Only what is written on the command line is checked: a group or preset file may set any key.
"""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from tsctl.config.errors import ConfigError

MULTIRUN = ("--multirun", "-m")
"""Hydra's multirun flags."""

ABLATE_HYDRA = ("hydra/launcher", "hydra.launcher.")
"""The Hydra settings ``tsctl ablate`` takes (a launcher and its parameters), as prefixes of an override's key."""

READ_BY: dict[str, tuple[str, ...]] = {
    "shards.": ("seed", "rollout"),
    "eval.checkpoint": ("eval",),
    "eval.step": ("eval",),
    "eval.benchmarks": ("eval",),
    "eval.overwrite": ("eval",),
    "eval.on_bad_row": ("eval",),
    "report.": ("ablate", "report"),
    "resume": ("train",),
    "task.reward": ("train", "rollout", "ablate"),
    "task.reward_p": ("train", "rollout", "ablate"),
}
"""A key (or ``prefix.``) set on the command line -> the commands that read it; any other command would ignore it."""


def key_of(override: str) -> str:
    """The key (or ``group``) an override sets, without its ``+``/``~``/``++`` prefix."""
    return override.split("=", 1)[0].lstrip("+~")


def is_hydra(override: str) -> bool:
    """An override of Hydra itself (launcher, sweeper, run dir, ...), not of the tsctl config."""
    return key_of(override).startswith(("hydra.", "hydra/")) or key_of(override) == "hydra"


def check_overrides(overrides: list[str], command: str) -> None:
    """Refuse what ``tsctl COMMAND`` would accept and ignore (see the module docstring) in one line.

    Raises:
        ConfigError: naming the override, why it would be ignored, and what to do instead.
    """
    for override in overrides:
        if override in MULTIRUN:
            instead = "train a sweep with `tsctl ablate <overrides>` (e.g. tsctl ablate ratio=0,25)" if command == "train" else "run it once per config"
            why = "tsctl ablate is a multirun already" if command == "ablate" else f"tsctl {command} runs one config; {instead}"
            raise ConfigError(override, f"{why}; drop {override}")
        if override.startswith("-"):
            raise ConfigError(override, f"tsctl {command} has no option {override}; see tsctl {command} --help")
    for override in overrides:
        key = key_of(override)
        if is_hydra(override):
            if command != "ablate":
                raise ConfigError(key, f"a Hydra setting, which tsctl {command} would ignore: tsctl composes its config with Hydra but runs a "
                                  "Hydra job only under tsctl ablate (which takes hydra/launcher=... and hydra.launcher.*); drop it")
            if not key.startswith(ABLATE_HYDRA):
                raise ConfigError(key, "tsctl ablate takes only Hydra's launcher settings (hydra/launcher=..., hydra.launcher.*): it places the "
                                  "sweep itself (<runs_dir>/<experiment>/<name>) and plans its points with Hydra's basic sweeper, so this "
                                  "setting would be ignored or break the sweep; drop it")
            continue
        readers = next((r for prefix, r in READ_BY.items() if key == prefix or (prefix.endswith(".") and key.startswith(prefix))), None)
        if readers is not None and command not in readers:
            named = " and ".join(f"tsctl {r}" for r in readers)
            raise ConfigError(key, f"tsctl {command} does not read it ({named} {'does' if len(readers) == 1 else 'do'}), so it would be ignored; drop it")
    if command != "ablate":
        _refuse_sweeps(overrides, command)


def _refuse_sweeps(overrides: list[str], command: str) -> None:
    """A sweep of several values in a command that runs one config."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return  # composing reports what does not parse
    for override in parsed:
        if override.is_sweep_override():
            instead = f"or train one run per value with `tsctl ablate {override.input_line} ...`" if command == "train" else "or run it once per value"
            raise ConfigError(override.key_or_group, f"{override.input_line} sweeps several values, but tsctl {command} runs one config; choose one value, {instead}")
