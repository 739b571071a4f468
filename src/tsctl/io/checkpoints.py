"""Checkpoints ``checkpoints/step-N/``: an HF model folder (with ``model.lora``, the adapter's folder:
:mod:`tsctl.io.adapters`) plus ``trainer_state.pt``.

The trainer state holds the optimiser, scheduler and RNG states and the step, so a resumed run
continues bit for bit. A checkpoint is written into a temp folder and renamed when complete, so a
process killed while saving leaves no folder that :func:`latest_checkpoint` would pick up (the
temp folder ``.step-N.*.tmp`` is deleted when the run is next opened, see :mod:`tsctl.io.run_lock`).
A full disk raises :class:`tsctl.io.atomic.WriteError` and leaves the older checkpoints as they were.
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
    try:
        return torch.load(path / STATE_FILE, weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError) as err:
        first = str(err).splitlines()[0].rstrip(".") if str(err) else type(err).__name__
        fix = checkpoint_fix(path) or "save it again"
        raise DamagedCheckpoint(f"could not load {path / STATE_FILE}: {first}; this checkpoint's files are damaged or incomplete: {fix}") from None


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
