"""Checkpoints ``checkpoints/step-N/``: an HF model folder (with ``model.lora``, the adapter's folder:
:mod:`tsctl.io.adapters`) plus ``trainer_state.pt``.

The trainer state holds the optimiser, scheduler and RNG states and the step, so a resumed run
continues bit for bit. A checkpoint is written into a temp folder and renamed when complete, so a
process killed while saving leaves no folder that :func:`latest_checkpoint` would pick up (the
temp folder ``.step-N.*.tmp`` is deleted when the run is next opened, see :mod:`tsctl.io.run_lock`).
A full disk raises :class:`tsctl.io.atomic.WriteError` and leaves the older checkpoints as they were.

Reading a checkpoint runs no code from it: ``trainer_state.pt`` (and a rank's ``rng-rank<r>.pt``) is loaded with
``torch.load(weights_only=True)``, which rebuilds tensors and plain containers only, plus the numpy types of the
RNG state (:data:`RNG_TYPES`). A file that names anything else (a crafted pickle in a shared runs folder) is refused
in one line, none of it run: :func:`load_trusted`.
"""

from __future__ import annotations

import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tsctl.io import atomic, faults
from tsctl.io.adapters import holds_weights, save_weights

STATE_FILE = "trainer_state.pt"

_RECONSTRUCT = np._core.multiarray._reconstruct if hasattr(np, "_core") else np.core.multiarray._reconstruct
RNG_TYPES: list[Any] = [
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
    _RECONSTRUCT,
    (_RECONSTRUCT, "numpy.core.multiarray._reconstruct"),  # the name a numpy 1.x checkpoint gives it
]
"""What ``torch.load(weights_only=True)`` may rebuild beyond tensors and containers: numpy's RNG state (``MT19937`` key,
a ``uint32`` array), as :func:`rng_state` saves it; nothing that can run code."""


class DamagedCheckpoint(RuntimeError):
    """A checkpoint's files cannot be read; the message names the file and what to do."""

_STEP_DIR = re.compile(r"^step-(\d+)$")


def step_of(folder: Path) -> int | None:
    """The step of a ``step-N`` folder (a checkpoint, a pool snapshot, an evaluation), None for any other name."""
    match = _STEP_DIR.match(folder.name)
    return int(match.group(1)) if match else None


def rng_state() -> dict[str, Any]:
    """The global RNG states of python, numpy and torch."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(folder: Path, step: int, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, state: dict[str, Any]) -> Path:
    """Write ``folder/step-<step>`` atomically: the weights (an adapter alone where the model carries one), the
    tokenizer and ``state`` (optimiser/scheduler/RNG/extra state)."""
    final = checkpoint_path(folder, step)
    with atomic.staged_dir(final) as tmp:
        save_weights(model, tmp)
        tokenizer.save_pretrained(tmp)
        faults.hit("checkpoint-partial")
        with open(tmp / STATE_FILE, "wb") as handle:  # a file object: a full disk raises OSError(ENOSPC), not "unexpected pos"
            torch.save({"step": step, **state}, handle)
    return final


def checkpoint_path(folder: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` lives (or would)."""
    return folder / f"step-{step}"


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``folder`` as ``(step, path)``, oldest first."""
    found = []
    for path in folder.glob("step-*") if folder.is_dir() else []:
        step = step_of(path)
        if step is not None and (path / STATE_FILE).is_file() and holds_weights(path):
            found.append((step, path))
    return sorted(found)


def latest_checkpoint(folder: Path) -> tuple[int, Path] | None:
    """The newest complete checkpoint, or None."""
    found = list_checkpoints(folder)
    return found[-1] if found else None


def load_state(path: Path) -> dict[str, Any]:
    """The trainer state saved beside a checkpoint's weights.

    Raises:
        DamagedCheckpoint: the file is damaged (the fix: :func:`checkpoint_fix`).
    """
    return load_trusted(path / STATE_FILE)


def load_trusted(file: Path) -> Any:
    """A ``torch.save`` file of a checkpoint folder, rebuilt from tensors, containers and :data:`RNG_TYPES` alone (no
    code of the file runs).

    Raises:
        DamagedCheckpoint: the file is damaged, or names other objects (it was not written by tsctl: loading them
            could run code); the message names the file, what it holds and the fix.
    """
    fix = checkpoint_fix(file.parent) or "save it again"
    try:
        with torch.serialization.safe_globals(RNG_TYPES):
            return torch.load(file, weights_only=True)
    except pickle.UnpicklingError as err:
        foreign = _foreign_globals(file)
        if foreign:
            raise DamagedCheckpoint(
                f"refused to load {file}: it names {', '.join(foreign[:3])}, which tsctl never writes into a checkpoint, and "
                f"loading it could run code; nothing of it was run: {fix}"
            ) from None
        raise DamagedCheckpoint(f"could not load {file}: {_first_line(err)}; this checkpoint's files are damaged or incomplete: {fix}") from None
    except (RuntimeError, EOFError) as err:
        raise DamagedCheckpoint(f"could not load {file}: {_first_line(err)}; this checkpoint's files are damaged or incomplete: {fix}") from None


def _foreign_globals(file: Path) -> list[str]:
    """The names in ``file``'s pickle that are neither torch's safe globals nor :data:`RNG_TYPES` (read from its opcodes,
    nothing run); empty where the file cannot be read that way."""
    allowed = {f"{t.__module__}.{t.__qualname__}" if not isinstance(t, tuple) else t[1] for t in RNG_TYPES}
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(file)
    except Exception:  # noqa: BLE001 - a file too damaged to list: reported as damaged by the caller
        return []
    return [name for name in names if name not in allowed]


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0].rstrip(".") if str(err) else type(err).__name__


def checkpoint_fix(path: Path) -> str | None:
    """What to do when the files of ``path`` are damaged, if it is a run's checkpoint folder; None otherwise."""
    if path.parent.name != "checkpoints" or step_of(path) is None:
        return None
    return f"delete {path}, then rerun (resume=true continues from the checkpoint before it)"


def prune_checkpoints(folder: Path, keep: int, protect: set[int] = frozenset()) -> None:
    """Delete all but the newest ``keep`` checkpoints (``keep=0`` keeps all); never those in ``protect``."""
    if keep <= 0:
        return
    for step, path in list_checkpoints(folder)[:-keep]:
        if step not in protect:
            shutil.rmtree(path)
