"""The process-wide state a test may change and must give back: environment, working directory, signal handlers,
loggers, torch's global settings and the compiler's configs.

:func:`snapshot` reads it, :func:`differences` names what a test left changed, :func:`restore` puts it back.
``conftest.py`` does all three around every test, so a leak fails the test that made it (and not, later, an
unrelated one in the same worker) while the tests after it still start from the state they expect.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

import torch

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""The signals whose handlers a command installs while it runs (and must hand back)."""
OWN_ENV = ("PYTEST_CURRENT_TEST", "_TORCHINDUCTOR_", "TORCHINDUCTOR_CACHE_DIR")
"""Environment variables pytest and torch's compiler set for themselves (prefixes; the compiler names its cache folder
for the processes it starts at its first compile): not a test's to give back."""
OWN_LOGGERS = ("torch",)
"""Loggers torch sets up lazily (handlers swapped on first use): torch's, not a test's."""
CONFIGS = ("torch._inductor.config", "torch._dynamo.config", "torch._functorch.config")
"""torch's config modules, compared where a test imported them (reading one does not import it)."""


@dataclass(frozen=True)
class State:
    """One reading of the process-wide state (each field comparable with ``==``)."""

    environ: dict[str, str]
    cwd: str
    handlers: dict[int, Any]
    loggers: dict[str, tuple]
    torch_settings: dict[str, Any]
    configs: dict[str, dict[str, Any]]


def _logger_state(logger: logging.Logger) -> tuple:
    return (logger.level, tuple(logger.handlers), logger.propagate, logger.disabled)


_UNTOUCHED = (logging.NOTSET, (), True, False)


def _loggers() -> dict[str, tuple]:
    """Every logger's level, handlers, propagation and disabled flag, root included (torch's own aside)."""
    found = {name: _logger_state(logger) for name, logger in logging.Logger.manager.loggerDict.items()
             if isinstance(logger, logging.Logger) and name.split(".")[0] not in OWN_LOGGERS}
    return {"<root>": _logger_state(logging.getLogger()), **found}


def _torch_settings() -> dict[str, Any]:
    return {
        "num_threads": torch.get_num_threads(),
        "default_dtype": torch.get_default_dtype(),
        "grad_enabled": torch.is_grad_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


HIDDEN = "<deleted>"
"""The key of a config's reading that lists its deleted keys (``delattr``, as ``monkeypatch`` undoes a ``setattr`` of a
key the module hides from ``hasattr``: such a key reads as its default but is gone for the compiler)."""


def _config(module: Any) -> dict[str, Any]:
    return {**module.get_config_copy(), HIDDEN: frozenset(k for k, entry in module._config.items() if entry.hide)}


def _configs() -> dict[str, dict[str, Any]]:
    return {name: _config(sys.modules[name]) for name in CONFIGS if name in sys.modules}


def snapshot() -> State:
    """The process-wide state now."""
    return State(
        environ={k: v for k, v in os.environ.items() if not k.startswith(OWN_ENV)},
        cwd=os.getcwd(),
        handlers={int(s): signal.getsignal(s) for s in SIGNALS},
        loggers=_loggers(),
        torch_settings=_torch_settings(),
        configs=_configs(),
    )


def differences(before: State, after: State) -> list[str]:
    """What changed from ``before`` to ``after``, one short line each (empty: nothing)."""
    found = []
    env_keys = sorted(k for k in set(before.environ) | set(after.environ) if before.environ.get(k) != after.environ.get(k))
    found += [f"environment variable {k}: {before.environ.get(k)!r} -> {after.environ.get(k)!r}" for k in env_keys]
    if before.cwd != after.cwd:
        found.append(f"working directory: {before.cwd} -> {after.cwd}")
    found += [f"handler of {signal.Signals(s).name}" for s in before.handlers if before.handlers[s] != after.handlers[s]]
    names = sorted(before.loggers)  # a logger a library configures as it is first imported is no test's leak
    found += [f"logger {n}: {before.loggers.get(n, _UNTOUCHED)} -> {after.loggers.get(n, _UNTOUCHED)}" for n in names
              if before.loggers.get(n, _UNTOUCHED) != after.loggers.get(n, _UNTOUCHED)]
    found += [f"torch {k}: {v} -> {after.torch_settings[k]}" for k, v in before.torch_settings.items() if after.torch_settings[k] != v]
    for name, config in after.configs.items():
        old = before.configs.get(name)
        if old is None:
            continue  # imported by this test: compared from the next test on
        keys = sorted(k for k in set(old) | set(config) if old.get(k, KeyError) != config.get(k, KeyError))
        found += [f"{name}.{k}: {old.get(k, '<missing>')!r} -> {config.get(k, '<missing>')!r}" for k in keys]
    return found


def restore(state: State) -> None:
    """Put back what :func:`snapshot` read (a config module's keys as they were, missing ones included)."""
    for key in [k for k in os.environ if not k.startswith(OWN_ENV) and k not in state.environ]:
        del os.environ[key]
    os.environ.update(state.environ)
    os.chdir(state.cwd)
    for s, handler in state.handlers.items():
        if handler is not None:
            signal.signal(s, handler)
    for name, values in state.loggers.items():
        _set_logger(logging.getLogger() if name == "<root>" else logging.getLogger(name), values)
    settings = state.torch_settings
    torch.set_num_threads(settings["num_threads"])
    torch.set_default_dtype(settings["default_dtype"])
    torch.set_grad_enabled(settings["grad_enabled"])
    torch.use_deterministic_algorithms(settings["deterministic"])
    torch.set_float32_matmul_precision(settings["float32_matmul_precision"])
    for name, config in state.configs.items():
        module = sys.modules[name]
        now = _config(module)
        module.load_config({k: v for k, v in config.items() if k != HIDDEN and (now.get(k) != v or k in now[HIDDEN])})


def _set_logger(logger: logging.Logger, values: tuple) -> None:
    level, handlers, propagate, disabled = values
    logger.setLevel(level)
    logger.handlers[:] = list(handlers)
    logger.propagate, logger.disabled = propagate, disabled
