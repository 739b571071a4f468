"""vLLM's own output: all of it in a log file; on the console only what a user needs to see.

vLLM logs through the ``vllm`` logger and, while an engine starts, also writes to the process's stderr directly
(a C++ warning about its memory binding) and raises Python warnings of its own (deprecations). :func:`open_log`,
called before vLLM is imported, sends every record of the ``vllm`` logger (INFO and up) to a log file and only its
warnings and errors to the console, less the :data:`NOISE` below; :func:`starting` sends the process's stderr and
the Python warnings to that file while an engine starts. A start-up error becomes one line (:func:`refusal`)
whose whole text is in the file. A user who sets ``VLLM_CONFIGURE_LOGGING=1`` gets vLLM's own logging instead.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

from tsctl.config.errors import ConfigError

NOISE: dict[str, str] = {
    "Triton is installed, but doesn't include CPU backend": "vLLM's CPU build runs without Triton's kernels",
    "Triton is not installed": "vLLM's CPU build runs without Triton's kernels",
    "Model Runner V2 requires Triton": "the V1 model runner is the one vLLM's CPU build uses",
    "Reset SSM cache type": "a setting of state-space models only",
    "is not found in LD_PRELOAD": "a faster allocator or OpenMP runtime vLLM can preload (docs/gpu.md: vLLM's CPU build)",
    "The global random seed is set to": "tsctl seeds its own generators after the engine starts (engines/vllm.py)",
    "doesn't allow to use `torch.set_num_threads`": "vLLM's own thread settings, ignored once its CPU build has pinned its threads",
    "is set; leaving Torch threads at": "tsctl decodes with the threads it is given (OMP_NUM_THREADS) on purpose",
    "Enforce eager set, disabling torch.compile": "what engine.vllm.enforce_eager=true asks for",
    "Inductor compilation was disabled by user settings": "what engine.vllm.enforce_eager=true asks for",
    "Compiling model again due to a load failure": "a compile cache of another version; vLLM compiles afresh",
    "different tokenizers for different LoRAs": "tsctl's adapters are served with their base model's tokenizer, which they were trained with",
    "RotaryEmbedding: Failed to load weights": "its cos/sin table is computed from the config, never in a checkpoint; every weight sync keeps it",
}
"""vLLM warnings shown only in the log file, by a part of their text, with why each is harmless."""
TIED_HEAD = {"ParallelLMHead: Failed to load weights": "a tied LM head has no weight of its own; tsctl rebuilds it from the embedding after every sync"}
"""Harmless only where the LM head shares the embedding's weight (the sync then sends the embedding alone)."""
CONFIGURE = "VLLM_CONFIGURE_LOGGING"


class _Quiet(logging.Filter):
    """Drops the records whose message holds a part of ``noise``."""

    def __init__(self, noise: dict[str, str]) -> None:
        super().__init__()
        self.noise = noise

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(part in message for part in self.noise)


class _Console(logging.StreamHandler):
    """The console's share of vLLM's records, written to the terminal even while :func:`starting` redirects stderr."""

    terminal: TextIO | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = self.terminal or sys.stderr
        super().emit(record)


MARK = "tsctl_vllm_log"
"""The attribute that marks the handlers :func:`open_log` puts on the ``vllm`` logger (the next engine's replace them)."""


def ours(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers of ``logger`` that :func:`open_log` put there."""
    return [h for h in logger.handlers if getattr(h, MARK, False)]


def open_log(folder: Path, tied_head: bool) -> Path:
    """Start ``folder/vllm-<time>-<pid>.log`` with the :data:`NOISE` table and route the ``vllm`` logger to it and to
    the console (see the module docstring); returns its path. ``tied_head``: the model's LM head is its embedding."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vllm-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    noise = {**NOISE, **(TIED_HEAD if tied_head else {})}
    with path.open("a") as log:
        log.writelines(f"tsctl shows no vLLM warning holding {part!r} on the console: {why}\n" for part, why in noise.items())
    if os.environ.setdefault(CONFIGURE, "0") != "0":
        return path
    logger = logging.getLogger("vllm")
    for handler in ours(logger):
        logger.removeHandler(handler)
        handler.close()
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [%(name)s] %(message)s"))
    console = _Console()
    console.setLevel(logging.WARNING)
    console.addFilter(_Quiet(noise))
    console.setFormatter(logging.Formatter("vLLM %(levelname)s: %(message)s"))
    for handler in (to_file, console):
        setattr(handler, MARK, True)
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return path


@contextmanager
def starting(path: Path) -> Iterator[None]:
    """While vLLM starts: the process's stderr (torch's C++ warnings, vLLM's progress bars) and Python's warnings go to
    the log at ``path``; the console handler of :func:`open_log` keeps writing to the terminal."""
    sys.stderr.flush()
    terminal = os.dup(2)
    consoles = [h for h in ours(logging.getLogger("vllm")) if isinstance(h, _Console)]
    with path.open("a") as log, os.fdopen(os.dup(terminal), "w") as stream, warnings.catch_warnings(record=True) as caught:
        os.dup2(log.fileno(), 2)
        for handler in consoles:
            handler.terminal = stream
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(terminal, 2)
            os.close(terminal)
            for handler in consoles:
                handler.terminal = None
            log.writelines(f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}\n" for w in caught)


def refusal(err: Exception, path: Path) -> ConfigError:
    """vLLM's start-up error ``err`` as one line naming the log at ``path``, where its traceback is written."""
    with path.open("a") as log:
        log.writelines(traceback.format_exception(err))
    text = " ".join(str(err).split()) or type(err).__name__
    if len(text) > 400:
        text = text[:400] + " ..."
    return ConfigError("engine", f"vLLM could not start this model: {text} (the whole message is in {path}); engine=hf runs any transformers model")
