"""The built-in model: built, warmed up on the task and cached under ``<runs_dir>/_models/``.

The cache key covers what the warm-up reads: the architecture, the warm-up settings and the task's content
(:func:`~tsctl.tasks.registry.task_content`: a file task's data digests, so rows rewritten at the same path build anew,
and the settings that shape its rows; a generated task's settings), and no other task key, so ``tsctl train`` after
``tsctl warmup`` reuses the same folder whatever its training reward or held-out checks, and changed problems build anew.
Its ``warmup.json`` records the warm-up's loss, time, weights' digest (a damaged cache is refused with the fix:
:func:`check_cache`) and arithmetic (torch threads and CPU instruction set,
on which the weights can depend beside the key: another thread count rounds differently). The held-out
score in it comes from the caller's scorer (the warm-up stage's,
:mod:`tsctl.stages.warmup`), which samples with an engine: models sit below engines.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Callable, Sequence

import torch
from safetensors import safe_open
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tsctl.config.schema import TsctlConfig
from tsctl.io import atomic, rounding
from tsctl.io.progress import console
from tsctl.models.loading import ModelLoadError
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.models.warmup import encode_examples, supervised_warmup
from tsctl.tasks.base import Problem, Task
from tsctl.tasks.digests import hash_file
from tsctl.tasks.registry import build_task, task_content

WARMUP_REPORT = "warmup.json"

Scorer = Callable[[PreTrainedModel, PromptFormatter, Task, Sequence[Problem]], float]
"""``score(model, formatter, task, problems) -> share of problems solved``: the held-out score of the warmed-up model."""


def builtin_dir(cfg: TsctlConfig) -> Path:
    """Cache folder of the built-in model for ``cfg``'s architecture, warm-up and task content (a file task's data is
    hashed: :mod:`tsctl.tasks.digests`).

    Raises:
        DataError: a data file that does not exist; a hub dataset that cannot be loaded.
    """
    key = {"tiny": dataclasses.asdict(cfg.model.tiny), "warmup": dataclasses.asdict(cfg.model.warmup), "task": task_content(cfg.task)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    cache = Path(cfg.model.cache_dir) if cfg.model.cache_dir else Path(cfg.runs_dir) / "_models"
    return cache / f"builtin-{cfg.task.name}-{digest}"


def weights_digest(folder: Path) -> str:
    """The first 12 hex digits of the sha256 of the model weights in ``folder`` (``*.safetensors``, in name
    order): runs whose built-in models share it started from the same weights, wherever they were warmed up."""
    digest = hashlib.sha256()
    for weights in sorted(Path(folder).glob("*.safetensors")):
        hash_file(weights, digest)
    return digest.hexdigest()[:12]


def base_model_entry(cfg: TsctlConfig, base: str) -> dict[str, str]:
    """A run manifest's ``base_model``: the folder training started from and, for the built-in model (warmed up
    on this machine), its weights' digest, which tells whether runs of one sweep started from the same weights."""
    return {"path": base, **({"weights_sha256": weights_digest(Path(base))} if cfg.model.path == "builtin" else {})}


def ensure_builtin(cfg: TsctlConfig, score: Scorer, rebuild: bool = False) -> Path:
    """Return the warmed-up built-in model folder, building it first when missing (or ``rebuild``);
    ``score`` grades a freshly warmed-up model on ``model.warmup.eval_problems`` held-out problems.

    Raises:
        ModelLoadError: the cached model is damaged (:func:`check_cache`).
    """
    final = builtin_dir(cfg)
    with atomic.file_lock(final.parent / f".{final.name}.lock"):
        if (final / WARMUP_REPORT).is_file() and not rebuild:
            check_cache(final)
            return final
        atomic.remove_stale(final.parent, f".{final.name}.*.tmp")  # a killed warm-up's staged folder; the lock keeps others out
        console.print(f"building the built-in model for task '{cfg.task.name}' -> {final}")
        with atomic.staged_dir(final) as tmp:
            model, tokenizer, report = build_and_warm_up(cfg, score)
            report["path"] = str(final)
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            report["weights_sha256"] = weights_digest(tmp)
            atomic.write_json(tmp / WARMUP_REPORT, report)
    console.print(f"warm-up done in {report['train_seconds']:.0f}s: held-out greedy accuracy {report['heldout_accuracy']:.3f}")
    return final


def check_cache(folder: Path) -> None:
    """Refuse a damaged cached built-in model: weights that differ from the digest its warm-up recorded, or (a cache
    written before the digest was) that safetensors cannot open.

    Raises:
        ModelLoadError: naming the folder and the fix (delete it, or ``tsctl warmup --rebuild``).
    """
    recorded = json.loads((folder / WARMUP_REPORT).read_text()).get("weights_sha256")
    why = None
    if recorded is not None and weights_digest(folder) != recorded:
        why = f"its weights' digest is not the {recorded} its warm-up recorded"
    elif recorded is None:
        for weights in sorted(folder.glob("*.safetensors")) or [folder / "model.safetensors"]:
            try:
                safe_open(str(weights), framework="pt").keys()
            except Exception as err:  # noqa: BLE001 - safetensors raises its own error (and OSError) for a damaged file
                why = f"{weights.name} cannot be read: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
                break
    if why is not None:
        raise ModelLoadError(f"the cached built-in model {folder} is damaged ({why}); delete that folder (rm -r {folder}) and rerun, "
                             "which warms the model up again, or rebuild it with `tsctl warmup --rebuild` and the same overrides")


def build_and_warm_up(cfg: TsctlConfig, score: Scorer) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]:
    """Build the tiny model, warm it up on the task's train split, score it on held-out problems with ``score``
    (the task read first: its data's refusals come before the model is built)."""
    task = build_task(cfg.task)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(cfg.model.tiny, tokenizer, seed=cfg.model.warmup.seed)
    formatter = PromptFormatter(tokenizer, use_chat_template=False)
    max_len = cfg.model.tiny.max_position_embeddings
    examples = encode_examples(list(task.problems("train")), formatter, max_len)
    report = supervised_warmup(model, examples, cfg.model.warmup, formatter.pad_id)
    heldout = list(task.problems("heldout"))[: cfg.model.warmup.eval_problems]
    report["heldout_accuracy"] = score(model, formatter, task, heldout)
    report["heldout_problems"] = len(heldout)
    report["parameters"] = sum(p.numel() for p in model.parameters())
    report["task"] = cfg.task.name
    report["arithmetic"] = rounding.current(torch.device("cpu"))  # the weights depend on it (tsctl.io.rounding)
    return model, tokenizer, report
