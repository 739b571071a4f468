"""A task's data checked before any model is built or warmed up, so that each data refusal costs seconds.

Reading a file task's data refuses a missing or empty file, a malformed row and a row past ``task.file.max_row_bytes``,
found by its size as the file is read, before it is decoded or tokenized (:mod:`tsctl.tasks.row_size`); then its
splits are checked (:func:`~tsctl.tasks.split_checks.check_splits`: an empty held-out split where held-out problems
are scored, held-out prompts that are train prompts); then the prompts of both splits are measured against the model's
context (:func:`~tsctl.models.prompt_fit.fitting` under ``task.overlong_prompts``) where its tokenizer and context are
known before its weights load (:func:`prompt_measure`): the built-in model's before it exists, a local HF folder's from
its tokenizer files and ``config.json`` (a second or less, where its weights take minutes). The context is the model's
own; what an engine serves less (a ``vllm`` engine's ``engine.vllm.max_model_len``, the ``hf`` engine's sliding window)
is applied once the engine is built, as for a hub id or an adapter folder, whose prompts are measured only then, before
any sampling. The notes these checks give (a small held-out split, repeated prompts, prompts left out) are printed
once, by the command, when it reads the task again. ``train``, ``warmup``, ``seed`` and ``rollout`` call it first.

Generated tasks (``countdown``, ``arithmetic``) give distinct, disjoint splits within the built-in model's context
and read no data: they are not drawn here (:data:`~tsctl.tasks.registry.TASKS`' ``data_files``).
"""

from __future__ import annotations

from pathlib import Path

from transformers import AutoConfig, AutoTokenizer

from tsctl.config.knobs import uses_seeds
from tsctl.config.schema import TaskConfig, TsctlConfig
from tsctl.io.adapters import is_adapter_folder
from tsctl.io.progress import console
from tsctl.models.prompt_fit import PromptRoom, fitting
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.tasks.records import DataError
from tsctl.tasks.registry import TASKS, build_task
from tsctl.tasks.split_checks import check_splits


def check_data(cfg: TsctlConfig, scored: int) -> None:
    """Read and check ``cfg``'s task data as the module docstring says; nothing is printed.

    Args:
        cfg: the command's config.
        scored: held-out problems the command scores (0: none; the held-out split may then be empty).

    Raises:
        DataError: a missing, empty or unreadable data file, a malformed or too large row (``task.file.on_bad_row=error``),
            an empty held-out split that is scored, held-out prompts that are train prompts (``task.heldout_overlap=error``).
        ConfigError: a prompt too long for the model's context where it is known before the weights load
            (:func:`prompt_measure`; ``task.overlong_prompts=error``), or none that fits.
    """
    if not TASKS.needs(cfg.task.name).data_files:
        return
    task = build_task(cfg.task)
    check_splits(task.problems("train"), task.problems("heldout"), scored=scored, overlap=cfg.task.heldout_overlap)
    measure = prompt_measure(cfg)
    if measure is None:
        return
    formatter, context = measure
    room = PromptRoom(context, cfg.engine.max_new_tokens, cfg.task.overlong_prompts, uses_seeds(cfg))
    quiet = console.quiet
    console.quiet = True  # the prompts task.overlong_prompts=drop leaves out are said once, by the command
    try:
        for split in ("train", "heldout"):
            fitting(task.problems(split), formatter, room, split)
    finally:
        console.quiet = quiet


def prompt_measure(cfg: TsctlConfig) -> tuple[PromptFormatter, int | None] | None:
    """The prompt formatter and context (tokens per request; None: unknown) of ``cfg.model.path``, known before its
    weights load: the built-in model's character tokenizer and ``model.tiny.max_position_embeddings``, or a local HF
    folder's tokenizer and ``config.json``'s ``max_position_embeddings``. None for a hub id, an adapter folder, or a
    folder whose tokenizer or config does not load (the model loader then names what is wrong)."""
    if cfg.model.path == "builtin":
        return PromptFormatter(build_char_tokenizer(), use_chat_template=False), cfg.model.tiny.max_position_embeddings  # as it is saved
    folder = Path(cfg.model.path).expanduser()
    if not (folder / "config.json").is_file() or is_adapter_folder(folder):
        return None
    try:
        formatter = PromptFormatter(AutoTokenizer.from_pretrained(folder), cfg.model.use_chat_template)
        context = getattr(AutoConfig.from_pretrained(folder), "max_position_embeddings", None)
    except (OSError, ValueError):
        return None
    return formatter, context


def check_final_eval_data(task: TaskConfig) -> None:
    """Refuse, before any point of a ``tsctl ablate`` trains, a file task whose held-out split is empty: every point's
    final checkpoint is scored on it, whatever ``trainer.eval_every`` says.

    Raises:
        DataError: the held-out split has no problem.
    """
    if TASKS.needs(task.name).data_files and next(iter(build_task(task).problems("heldout")), None) is None:
        raise DataError("the held-out split has no problem, and tsctl ablate scores each point's final checkpoint on it; give the "
                        "task more problems (a file task holds task.file.heldout_fraction of its rows out, or reads "
                        "task.file.heldout_path=<file>), or train the points one by one with tsctl train trainer.eval_every=0")


def train_scored(cfg: TsctlConfig) -> int:
    """Held-out problems ``tsctl train`` scores: ``trainer.eval_problems`` where it evaluates (``trainer.eval_every``)."""
    return cfg.trainer.eval_problems if cfg.trainer.eval_every else 0
