"""(d) packed against padded: tsctl's policy update on one batch with DAPO's spread of response lengths.

The RL sides of (a), (b) and (d) generate exactly ``max_new_tokens`` per sample, so their rows have no
padding to remove. Here one batch of the first step's prompts (``batch_size`` x ``n`` rows) gets
responses of 16 to 48 random tokens (uniform, a fixed seed), and the run's :class:`~tsctl.trainer.learner.Learner`
updates on it (:meth:`~tsctl.trainer.learner.Learner.update`) with ``trainer.pack`` on and off, prompts shared (``trainer.share_prompts``, the default) and
not, and packed with ``trainer.compile``, from the same weights each time. Update tokens/s counts the rows' real tokens (prompt + response).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import torch

from rl_bench.settings import Settings
from rl_bench.sides import load_without_eos
from rl_bench.timing import timed
from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import RolloutBatch, collate, pi_b_on_prefix
from tsctl.models.compiled import CompiledLayers
from tsctl.models.forward import Forward
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import Sample
from tsctl.tasks.base import Problem
from tsctl.tasks.schedule import step_prompts
from tsctl.trainer.learner import Learner
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.update import loss_mask

RESPONSE_TOKENS = (16, 48)
"""Shortest and longest response of the batch, in tokens."""

SIDES = {
    "update_padded": (False, True, False), "update_packed": (True, True, False), "update_padded_rows": (False, False, False),
    "update_packed_rows": (True, False, False), "update_packed_compiled": (True, True, True),
}
"""Each side's ``(trainer.pack, trainer.share_prompts, trainer.compile)``."""


def spread_batch(s: Settings, formatter: PromptFormatter, problems: list[Problem], vocab: int) -> RolloutBatch:
    """The first step's prompts, ``n`` rows each, with responses of :data:`RESPONSE_TOKENS` random tokens."""
    rng = np.random.default_rng(s.seed)
    samples = []
    for group, i in enumerate(step_prompts(s.seed, 0, s.batch_size, len(problems))):
        prompt = formatter.prompt_ids(problems[i].question)
        for _ in range(s.n):
            length = int(rng.integers(RESPONSE_TOKENS[0], RESPONSE_TOKENS[1] + 1))
            tokens = rng.integers(4, vocab, length).tolist()
            samples.append(Sample(group, str(i), prompt, tokens, [0.0] * length, finished=True))
    return collate(samples, torch.from_numpy(rng.standard_normal(len(samples))), formatter.pad_id)


def packing_sides(s: Settings, model_dir: Path, problems: list[Problem], compiled: bool = True) -> tuple[dict[str, Callable[[], dict]], int]:
    """One callable per :data:`SIDES` entry (one policy update from the same weights: wall and CPU seconds; the
    compiled side only with ``compiled``), and the real tokens of the batch."""
    model, tokenizer = load_without_eos(model_dir)
    formatter = PromptFormatter(tokenizer, use_chat_template=False)
    batch = spread_batch(s, formatter, problems, len(tokenizer))
    start = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        old = pi_b_on_prefix(Forward(s.temperature).recompute(model.eval(), batch)[0], batch)
    batch.denominators = batch.engine_logprobs = old  # the scored columns the update reads, the loss mask below

    layers = CompiledLayers(model) if compiled else None

    def side(pack_rows: bool, share: bool, compile_layers: bool) -> Callable[[], dict]:
        cfg = TsctlConfig()
        cfg.engine.temperature = s.temperature
        cfg.algo.clip_low, cfg.algo.clip_high = s.clip_low, s.clip_high
        cfg.trainer.mini_batches, cfg.trainer.pack, cfg.trainer.share_prompts = s.mini_batches, pack_rows, share
        cfg.trainer.lr, cfg.trainer.weight_decay, cfg.trainer.warmup_steps = s.lr, 0.01, 0  # AdamW's defaults, a constant lr

        def go() -> dict:
            model.load_state_dict(start)
            learner = Learner(cfg, Parallel(model))  # the update's side alone: no engine, reference or checkpoints
            learner.compiled = layers if compile_layers else None  # one compiled copy for the whole bench
            batch.loss_mask = loss_mask(batch, cfg)
            _, seconds = timed(learner.update, batch, 0)
            return seconds

        return go

    return {name: side(*flags) for name, flags in SIDES.items() if compiled or not flags[2]}, int(batch.attention_mask.sum())


def packing_figures(r: dict, clock: str) -> dict[str, float]:
    """Update tokens/s of each side in one round, and the packed / padded ratios (prompts shared, and not)."""
    tokens = r["packing_tokens"]
    fig = {f"{name}_tokens_per_s": tokens / r[name][clock] for name in SIDES if name in r}
    fig["d_packed_over_padded"] = r["update_padded"][clock] / r["update_packed"][clock]
    fig["packed_over_padded_rows"] = r["update_padded_rows"][clock] / r["update_packed_rows"][clock]
    if "update_packed_compiled" in r:
        fig["d_packed_compiled_speedup"] = r["update_packed"][clock] / r["update_packed_compiled"][clock]
    return fig


FIGURES = ["update_padded_tokens_per_s", "update_packed_tokens_per_s", "update_padded_rows_tokens_per_s",
           "update_packed_rows_tokens_per_s", "packed_over_padded_rows", "update_packed_compiled_tokens_per_s", "d_packed_compiled_speedup"]
"""The figures of :func:`packing_figures` besides the target's, in the table's order."""
