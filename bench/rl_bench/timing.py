"""Clocks (wall and CPU seconds), the matmul peaks and the FLOPs of an update, and the interleaved rounds."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
from transformers import PreTrainedModel

from rl_bench.settings import CLOCKS, Settings
from tsctl.models.prompts import PromptFormatter
from tsctl.tasks.base import Problem
from tsctl.tasks.schedule import step_prompts


class Stopwatch:
    """Wall-clock and process CPU seconds since it was started."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> dict[str, float]:
        return {"wall": time.perf_counter() - self.wall, "cpu": time.process_time() - self.cpu}


def timed(fn: Callable, *args, **kwargs) -> tuple[object, dict[str, float]]:
    """``fn(*args, **kwargs)`` and its wall and CPU seconds."""
    watch = Stopwatch()
    out = fn(*args, **kwargs)
    return out, watch.read()


# ---------------------------------------------------------------------------------------------
# FLOPs, the matmul peak and a plain HF forward + backward reference.


def matmul_peak(size: int = 1024, repeats: int = 10) -> dict[str, float]:
    """Median fp32 GFLOP/s (wall and CPU) of ``size x size`` @ ``size x size`` with the current thread count."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(3):
        a @ b
    runs = [timed(torch.matmul, a, b)[1] for _ in range(repeats)]
    return {clock: 2 * size**3 / statistics.median(t[clock] for t in runs) / 1e9 for clock in CLOCKS}


def shape_matmul_peak(model: PreTrainedModel, tokens: int, repeats: int = 5) -> dict[str, float]:
    """GFLOP/s (wall and CPU) of fp32 matmuls shaped like the update's: ``tokens`` rows through each block projection.

    One round multiplies a [tokens, in] activation by every [in, out] weight of one block (q, k, v,
    o, gate, up, down), the shapes that carry most of the update's FLOPs: what the update's GEMMs
    alone reach on this machine, next to the square-matrix peak.
    """
    c = model.config
    d, f, kv = c.hidden_size, c.intermediate_size, c.num_key_value_heads * (c.hidden_size // c.num_attention_heads)
    shapes = [(d, d), (d, kv), (d, kv), (d, d), (d, f), (d, f), (f, d)]
    pairs = [(torch.randn(tokens, i), torch.randn(i, o)) for i, o in shapes]

    def run() -> None:
        for a, b in pairs:
            a @ b

    run()
    times = [timed(run)[1] for _ in range(repeats)]
    flops = sum(2 * tokens * i * o for i, o in shapes)
    return {clock: flops / statistics.median(t[clock] for t in times) / 1e9 for clock in CLOCKS}


def layer_params(model: PreTrainedModel) -> int:
    """Parameters of the transformer blocks (the embedding and the tied LM head excluded)."""
    return sum(p.numel() for name, p in model.named_parameters() if ".layers." in name)


def update_flops(model: PreTrainedModel, lengths: list[int], lm_head_tokens: int, block_share: float = 1.0) -> float:
    """Forward + backward FLOPs of rows of ``lengths`` tokens, the LM head applied at ``lm_head_tokens`` positions.

    ``block_share`` scales the transformer blocks' terms: the share of the rows' tokens actually run through them.
    """
    c = model.config
    blocks = 6 * layer_params(model) * sum(lengths) + 12 * c.num_hidden_layers * c.hidden_size * sum(n * n for n in lengths)
    return block_share * blocks + 6 * c.hidden_size * c.vocab_size * lm_head_tokens


def step_lengths(s: Settings, formatter: PromptFormatter, problems: list[Problem], step: int) -> list[int]:
    """Row lengths (prompt + response) of tsctl's batch at ``step``."""
    prompts = step_prompts(s.seed, step, s.batch_size, len(problems))
    return [len(formatter.prompt_ids(problems[i].question)) + s.max_new_tokens for i in prompts for _ in range(s.n)]


def rotate(items: list, k: int) -> list:
    """``items`` rotated left by ``k``: the order of the sides changes from one round to the next."""
    k %= len(items)
    return items[k:] + items[:k]
