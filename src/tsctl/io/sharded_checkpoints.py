"""Checkpoints written by the ranks of a ``torchrun`` job: the sharded training state in torch.distributed.checkpoint.

``checkpoints/step-N/`` of such a run holds:

- the HF ``save_pretrained`` export of the full weights and the tokenizer (rank 0), read by
  ``tsctl eval``, the behaviour pool and vLLM exactly as a one-process checkpoint's (the weights in
  the compute dtype: bf16 on GPU, float32 on CPU; the float32 master weights are in ``dcp/``); for a
  policy that carries a LoRA adapter, the adapter folder of :mod:`tsctl.io.adapters` instead, its
  float32 ``lora_A``/``lora_B`` gathered from the shards, as a one-process run writes it;
- ``dcp/``: the trainable weights (every weight, or a LoRA policy's adapter alone: its base is frozen
  and stays the base model's) and their AdamW state as the ranks hold them (FSDP2 DTensor shards),
  written by every rank with ``torch.distributed.checkpoint`` (DCP); DCP reshards on load, so the run
  resumes on any number of ranks, one process included (2 -> 1, 1 -> 2, 2 -> 4);
- ``rng-rank<r>.pt``: each rank's python, numpy and torch RNG states;
- ``trainer_state.pt`` (rank 0, written last): the step, scheduler, non-finite skips, rank 0's RNG and
  ``world_size``, without an ``optimizer`` entry (it is in ``dcp/``).

A one-process checkpoint keeps the format of :mod:`tsctl.io.checkpoints` (its optimiser state inside
``trainer_state.pt``); :func:`load_training_state` reads either into a plain or a sharded model. The
folder is staged and renamed by rank 0 once every rank has written its part, so a kill leaves only
a temp folder.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_optimizer_state_dict, set_state_dict
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tsctl.distributed.fsdp import full_tensors
from tsctl.distributed.world import barrier, broadcast_object, current
from tsctl.io import atomic, faults
from tsctl.io.adapters import ADAPTER_NAME, adapter_file_tensors, has_adapter, write_adapter
from tsctl.io.checkpoints import STATE_FILE, checkpoint_path, load_trusted, rng_state, set_rng_state

SHARDS_DIR = "dcp"
"""The DCP folder of a checkpoint written by several ranks."""
TRAINABLE = StateDictOptions(ignore_frozen_params=True)
"""What ``dcp/`` holds of the model: its parameters that require grad (frozen ones are the base model's)."""


def rng_file(rank: int) -> str:
    return f"rng-rank{rank}.pt"


@contextlib.contextmanager
def _staged(final: Path) -> Iterator[Path]:
    """Rank 0's temp folder for ``final``, known to every rank; renamed by rank 0 once every rank has left the block."""
    if current().main:
        with atomic.staged_dir(final) as tmp:
            broadcast_object(str(tmp))
            yield tmp
            barrier()
    else:
        tmp = Path(broadcast_object(""))
        yield tmp
        barrier()


def save_sharded_checkpoint(
    folder: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, export: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase, state: dict[str, Any],
) -> Path:
    """Write ``folder/step-<step>`` from every rank (see the module docstring); every rank must call it.

    Args:
        model, optimizer: the sharded policy and its optimiser.
        export: a full copy of the same weights, saved as the HF folder by rank 0 (unless ``model`` carries an
            adapter: the adapter folder is then written from ``model``'s gathered shards).
        state: scheduler, RNG and other trainer state (rank 0's is saved).
    """
    world = current()
    final = checkpoint_path(folder, step)
    with _staged(final) as tmp:
        model_state, optim_state = get_state_dict(model, optimizer, options=TRAINABLE)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=tmp / SHARDS_DIR)
        torch.save(rng_state(), tmp / rng_file(world.rank))
        adapter = dict(full_tensors(model, frozen=False)) if has_adapter(model) else None  # a collective: every rank
        barrier()
        if world.main:
            if adapter is None:
                export.save_pretrained(tmp)
            else:
                write_adapter(tmp, model.peft_config[ADAPTER_NAME], adapter_file_tensors(adapter))
            tokenizer.save_pretrained(tmp)
            faults.hit("checkpoint-partial")
            with open(tmp / STATE_FILE, "wb") as handle:
                torch.save({"step": step, **state, "world_size": world.size}, handle)
    return final


def load_training_state(path: Path, state: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Restore the optimiser (and, from DCP shards, the weights) of checkpoint ``path`` into ``model``, plain or sharded.

    Args:
        state: the checkpoint's ``trainer_state.pt``. With an ``optimizer`` entry (a one-process checkpoint) that
            state is loaded (resharded by parameter name when ``model`` is sharded); without one, ``dcp/``.
    """
    if "optimizer" in state:
        if not current().distributed:
            optimizer.load_state_dict(state["optimizer"])
            return
        full = _by_name(state["optimizer"], model)
        set_optimizer_state_dict(model, optimizer, full, options=StateDictOptions(full_state_dict=True))
        return
    model_state, optim_state = get_state_dict(model, optimizer, options=TRAINABLE)
    dcp.load({"model": model_state, "optim": optim_state}, checkpoint_id=path / SHARDS_DIR)
    loaded = set_state_dict(
        model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state, options=StateDictOptions(strict=False)
    )
    missing = sorted(set(loaded.missing_keys) - {name for name, p in model.named_parameters() if not p.requires_grad})
    if missing or loaded.unexpected_keys:  # only the frozen weights, which dcp/ does not hold, may be left as they are
        raise KeyError(f"checkpoint {path} does not match the model: missing {missing[:3]}, unexpected {loaded.unexpected_keys[:3]}")


def restore_rng(path: Path, state: dict[str, Any]) -> None:
    """This rank's RNG states: its own file of checkpoint ``path``, else rank 0's (a rank the writing job did not have)."""
    own = path / rng_file(current().rank)
    set_rng_state(load_trusted(own) if own.is_file() else state["rng"])


def _by_name(saved: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """A one-process ``optimizer.state_dict()`` (parameters numbered in the order of ``model``'s trainable parameters:
    every one, or a LoRA policy's adapter) keyed by name."""
    names = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    return {
        "state": {names[index]: value for index, value in saved["state"].items()},
        "param_groups": [{**group, "params": [names[i] for i in group["params"]]} for group in saved["param_groups"]],
    }
