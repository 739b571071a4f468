"""Supervised warm-up of the built-in tiny model on a task's worked solutions.

RL needs a policy that already writes the task's format and solves some problems: warm-up trains
the freshly built model with next-token cross-entropy on ``prompt -> solution<eos>`` (loss on the
solution tokens only), then reports held-out greedy accuracy.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from tsctl.config.errors import ConfigError
from tsctl.config.schema import WarmupConfig
from tsctl.io.progress import make_progress
from tsctl.models.prompt_fit import SPARE
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem


@dataclass
class Example:
    """One supervised sequence: ``ids`` = prompt + response, loss on positions >= ``prompt_len``."""

    ids: list[int]
    prompt_len: int


def encode_examples(problems: list[Problem], formatter: PromptFormatter, max_len: int) -> list[Example]:
    """Examples for every problem with a worked solution that fits in ``max_len`` tokens (one of far more characters
    than that could hold is left out untokenized: :func:`~tsctl.models.prompt_fit.prompt_length`)."""
    examples = []
    for p in problems:
        if p.solution is None or len(p.question) + len(p.solution) > SPARE * (max_len + 1) * formatter.most_chars_per_token:
            continue
        prompt = formatter.prompt_ids(p.question)
        ids = prompt + formatter.response_ids(p.solution)
        if len(ids) <= max_len:
            examples.append(Example(ids=ids, prompt_len=len(prompt)))
    if not examples:
        raise _none_fits(problems, formatter, max_len)
    return examples


LONGEST_SUGGESTED = 4096
"""The longest ``model.tiny.max_position_embeddings`` a refusal suggests (past it the tiny model's cost is not worth it)."""


def _none_fits(problems: list[Problem], formatter: PromptFormatter, max_len: int) -> ConfigError:
    """Why no problem gives a warm-up example: none has a worked solution, or none fits ``max_len`` tokens (and the fixes)."""
    solved = [p for p in problems if p.solution is not None]
    if not solved:
        return ConfigError("model.path", "builtin warms up on the task's worked solutions, but no problem has one; give a file task its "
                           "task.file.solution_field=<the field that holds them>, or set model.path=<HF model folder>")
    shortest = min(len(formatter.prompt_ids(p.question)) + len(formatter.response_ids(p.solution or "")) for p in solved)
    raise_it = f"raise model.tiny.max_position_embeddings to {shortest} or more, " if shortest <= LONGEST_SUGGESTED else ""
    return ConfigError("model.tiny.max_position_embeddings", f"builtin warms up on the task's worked solutions, but none of the {len(solved)} "
                       f"problem(s) with one fits the model's {max_len} tokens (prompt + solution; the shortest takes {shortest}); {raise_it}"
                       "shorten the solutions (or the questions), or set model.path=<HF model folder>")


def collate(batch: list[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids`` [B, L], ``attention_mask`` [B, L] and ``labels`` [B, L] (-100 = no loss)."""
    width = max(len(e.ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, e in enumerate(batch):
        seq = torch.tensor(e.ids)
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
        labels[row, e.prompt_len : len(seq)] = seq[e.prompt_len :]
    return ids, mask, labels


def lr_at(step: int, total: int, peak: float) -> float:
    """Linear warm-up over 5% of ``total`` steps, then cosine decay to 10% of ``peak``."""
    warm = max(1, total // 20)
    if step < warm:
        return peak * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def supervised_warmup(model: PreTrainedModel, examples: list[Example], cfg: WarmupConfig, pad_id: int) -> dict[str, float]:
    """Train ``model`` in place for ``cfg.examples`` sequences; returns the final loss and seconds taken."""
    generator = torch.Generator().manual_seed(cfg.seed)
    total = max(1, cfg.examples // cfg.batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    order = torch.empty(0, dtype=torch.long)
    loss_ema = float("nan")
    start = time.perf_counter()
    model.train()
    with make_progress() as progress:
        bar = progress.add_task("warm-up", total=total, status="")
        for step in range(total):
            if len(order) < cfg.batch_size:
                order = torch.cat([order, torch.randperm(len(examples), generator=generator)])
            picked, order = order[: cfg.batch_size], order[cfg.batch_size :]
            ids, mask, labels = collate([examples[i] for i in picked.tolist()], pad_id)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total, cfg.lr)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            loss_ema = loss.item() if math.isnan(loss_ema) else 0.95 * loss_ema + 0.05 * loss.item()
            progress.update(bar, advance=1, status=f"loss {loss_ema:.3f}")
    model.eval()
    return {"final_loss": loss_ema, "train_seconds": time.perf_counter() - start, "steps": total}
