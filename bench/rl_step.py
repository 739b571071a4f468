"""RL step time, rollout throughput and Thinking Seeds overhead, against TRL and plain HF generate.

One run measures, on the built-in tiny model (default ``TinyModelConfig``, character tokenizer, fp32,
CPU) and the same RL settings on every side (16 prompts x 8 samples, 48 new tokens, 2 mini-batches,
DAPO loss with clip 0.2 / 0.28, no KL, lr 2e-4, temperature 1):

(a) seconds per RL step of ``tsctl train`` against TRL's ``GRPOTrainer`` (``loss_type="dapo"``, no
    vLLM). One RL step is: sample 128 responses, score them, one no-grad forward for the old
    log-probs, two optimiser steps. TRL is configured to do exactly that: a generation batch of 128,
    ``per_device_train_batch_size=64``, ``steps_per_generation=2`` (so it also computes old log-probs),
    ``beta=0`` (no reference model), no gradient checkpointing; its step is timed from
    ``on_step_begin`` to ``on_step_end`` of its two optimiser steps (start-up excluded).
(b) seconds per step of tsctl at ``ratio=25 refresh=10`` against ``ratio=0``: each run covers one
    whole refresh window, so the seed generation of that window (written at its first step) is
    amortised over the window's steps. Every step's ``time/step`` includes ``time/seeds``.
(c) generated tokens/s of tsctl's ``hf`` engine against one plain ``model.generate`` call on the same
    batch of 128 sequences (16 prompts x 8), same sampling (temperature 1, no top-k, no top-p).
(d) training tokens/s and achieved GFLOP/s of tsctl's update phase (``time/update``), against an
    fp32 1024x1024 ``torch.matmul`` peak measured in the same rounds with the same thread count. For
    reference, a plain HF forward + backward + AdamW step on the same batch is measured too, and so
    are matmuls of the update's own shapes (one mini-batch's tokens through one block's projections),
    what the update's GEMMs alone reach next to the square peak.

Equal work: the model is freshly initialised (the same weights for every side) and its EOS logit is
pushed to -1e4 by a forward hook on the LM head, so no response stops early: every side generates
exactly 48 tokens per sample. Rewards are then all 0 (so are the advantages); that changes no
amount of computation on either side.

Noise: the sides are interleaved in rounds (the order rotates each round); each figure is the
median over rounds, with the min-max spread. Ratios are taken within a round, then summarised.
Every time is taken twice: wall-clock (what the targets are judged on) and CPU seconds of this
process, which a machine shared with other jobs disturbs far less (with one torch thread, CPU
seconds are the work done; wall seconds also count the time other processes held the core).

FLOPs of the update phase, per step (model FLOPs, padding excluded), for rows of length l_i
(prompt + response) and R response tokens::

    6 * P_layers * sum_i l_i  +  12 * n_layers * d * sum_i l_i^2  +  6 * d * V * R

with P_layers the parameters of the transformer blocks (attention and MLP projections, norms), the
second term attention scores and values (full l x l, forward and backward) and the third the LM head,
which tsctl applies at response positions only. The plain HF reference computes logits at every
position, so its LM-head term uses sum_i l_i instead of R.

tsctl runs each distinct prompt of a mini-batch through the model once (``trainer.share_prompts``), so
its update executes fewer FLOPs than its rows stand for. (d) divides the FLOPs it executes: the two
block terms scaled by the step's ``forward_token_share`` (tokens its forwards ran / tokens of its
rows, from the run's metrics). ``update_model_gflops_per_s`` divides the whole rows' FLOPs instead:
the work a row-by-row update would have done, per second of tsctl's update.

    pip install -e ".[bench]"
    python bench/rl_step.py [--rounds 3] [--steps 10] [--threads 1] [--gen-repeats 5] [--skip-trl] [--profile]

Writes ``bench/results/<timestamp>.json`` and prints a table; ``--profile`` adds pyinstrument call
trees of one run of each side (``<timestamp>-profile-<side>.txt``) for finding what bounds a figure.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator
from unittest import mock

os.environ.setdefault("TSCTL_NO_PROGRESS", "1")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from transformers import PreTrainedModel, PreTrainedTokenizerBase  # noqa: E402

import tsctl.train  # noqa: E402
from tsctl.config.compose import compose_config  # noqa: E402
from tsctl.config.schema import TinyModelConfig, TsctlConfig  # noqa: E402
from tsctl.engines.base import Request, SamplingParams  # noqa: E402
from tsctl.engines.hf import HFEngine  # noqa: E402
from tsctl.models.loading import load_model  # noqa: E402
from tsctl.models.prompts import PromptFormatter  # noqa: E402
from tsctl.models.tiny import build_tiny_model  # noqa: E402
from tsctl.models.tokenizer import build_char_tokenizer  # noqa: E402
from tsctl.seeds.bank import SeedBank  # noqa: E402
from tsctl.tasks.base import Problem  # noqa: E402
from tsctl.tasks.registry import build_task  # noqa: E402
from tsctl.trainer.schedule import step_prompts  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CLOCKS = ("wall", "cpu")
TARGETS = {
    "a_tsctl_over_trl": ("<=", 0.5),
    "b_ratio25_over_ratio0": ("<=", 1.10),
    "c_engine_over_generate": (">=", 1.5),
    "d_update_share_of_peak": (">=", 0.60),
}


@dataclass(frozen=True)
class Settings:
    """The RL settings every side runs with."""

    batch_size: int = 16
    n: int = 8
    max_new_tokens: int = 48
    mini_batches: int = 2
    lr: float = 2e-4
    clip_low: float = 0.2
    clip_high: float = 0.28
    temperature: float = 1.0
    refresh: int = 10
    seed: int = 0

    @property
    def samples(self) -> int:
        return self.batch_size * self.n


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
# The model: built by tsctl's own builders, saved once, loaded by every side with EOS suppressed.


def save_bench_model(folder: Path, seed: int) -> None:
    """Build the default tiny Llama and the character tokenizer and save both to ``folder``."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tokenizer, seed=seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def suppress_eos(model: PreTrainedModel, eos_id: int) -> PreTrainedModel:
    """Make ``model`` never emit EOS: its LM head's EOS logit becomes -1e4 (finite, so entropies stay finite)."""
    index = torch.tensor([eos_id])
    model.get_output_embeddings().register_forward_hook(lambda module, args, out: out.index_fill(-1, index, -1e4))
    return model


def load_without_eos(path, dtype="float32", device="cpu") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """:func:`tsctl.models.loading.load_model`, then :func:`suppress_eos` with the tokenizer's EOS."""
    model, tokenizer = load_model(path, dtype, device)
    return suppress_eos(model, tokenizer.eos_token_id), tokenizer


# ---------------------------------------------------------------------------------------------
# tsctl: the real training loop, in process.


def tsctl_overrides(s: Settings, model_dir: Path, runs_dir: Path, name: str, ratio: int, steps: int) -> list[str]:
    """Hydra overrides for a ``tsctl train`` run with settings ``s`` and no evals or intermediate checkpoints."""
    return [
        f"model.path={model_dir}", "model.dtype=float32", "model.device=cpu", f"runs_dir={runs_dir}", f"name={name}",
        f"seed={s.seed}", f"ratio={ratio}", f"refresh={s.refresh}", "algo=dapo",
        f"algo.clip_low={s.clip_low}", f"algo.clip_high={s.clip_high}",
        f"engine.max_new_tokens={s.max_new_tokens}", f"engine.temperature={s.temperature}", "engine.top_p=1.0",
        f"trainer.steps={steps}", f"trainer.batch_size={s.batch_size}", f"trainer.n={s.n}",
        f"trainer.mini_batches={s.mini_batches}", "trainer.micro_batch_size=0", f"trainer.lr={s.lr}",
        "trainer.eval_every=0", f"trainer.save_every={steps + 1}", "trainer.keep_checkpoints=1",
    ]


def run_tsctl(s: Settings, model_dir: Path, runs_dir: Path, name: str, ratio: int, steps: int) -> dict[str, list[float]]:
    """Run ``tsctl.train.train`` for ``steps`` steps; per step, its wall times (from the metric records) and CPU times.

    CPU seconds are taken around the loop's own calls: ``SeedBank.prepare`` and ``train_step`` make up
    a step (as ``time/step`` does), ``policy_update`` is the update phase (as ``time/update``).
    """
    composed = compose_config(tsctl_overrides(s, model_dir, runs_dir, name, ratio, steps))
    cpu: dict[str, dict[int, float]] = {"step": defaultdict(float), "update": defaultdict(float)}
    current = [0]

    def clocked(kind: str, fn: Callable, step_of: Callable[..., int]) -> Callable:
        def wrapper(*args, **kwargs):
            if kind == "step":
                current[0] = step_of(*args)
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu[kind][current[0]] += time.process_time() - start

        return wrapper

    patches = [
        mock.patch.object(tsctl.train, "load_model", load_without_eos),
        mock.patch.object(tsctl.train, "train_step", clocked("step", tsctl.train.train_step, lambda step, *_: step)),
        mock.patch.object(SeedBank, "prepare", clocked("step", SeedBank.prepare, lambda bank, step, *_: step)),
        mock.patch.object(tsctl.train, "policy_update", clocked("update", tsctl.train.policy_update, lambda *_: 0)),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        run = tsctl.train.train(composed)
    records = [r for r in run.read_metrics() if "time/step" in r]
    assert len(records) == steps and all(r["response_length/mean"] == s.max_new_tokens for r in records), "a response stopped early"
    return {
        "wall_step_s": [r["time/step"] for r in records],
        "cpu_step_s": [cpu["step"][r["step"] - 1] for r in records],
        "wall_update_s": [r["time/update"] for r in records],
        "cpu_update_s": [cpu["update"][r["step"] - 1] for r in records],
        "wall_seeds_s": [r["time/seeds"] for r in records],
        "wall_generate_s": [r["time/generate"] for r in records],
        "wall_old_logprobs_s": [r["time/old_logprobs"] for r in records],
        "train_tokens": [round(r["train_tokens_per_s"] * r["time/update"]) for r in records],
        "forward_token_share": [r["forward_token_share"] for r in records],
    }


# ---------------------------------------------------------------------------------------------
# TRL's GRPOTrainer on the same model, prompts and settings.


def run_trl(s: Settings, model_dir: Path, out_dir: Path, problems: list[Problem], steps: int, threads: int) -> dict[str, list[float]]:
    """Train TRL's GRPOTrainer for ``steps`` RL steps; wall and CPU seconds of each (start-up excluded)."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = load_without_eos(model_dir)
    task = build_task(TsctlConfig().task)
    formatter = PromptFormatter(tokenizer, use_chat_template=False)
    indices = [i for step in range(steps) for i in step_prompts(s.seed, step, s.batch_size, len(problems))]
    # The built-in tokenizer has no chat template and adds no BOS: the text carries it, as tsctl's prompts do.
    texts = [f"{tokenizer.bos_token}{problems[i].question}\n" for i in indices]
    assert tokenizer(text=texts[:4])["input_ids"] == [formatter.prompt_ids(problems[i].question) for i in indices[:4]]

    def reward(prompts, completions, problem, **_) -> list[float]:
        return [task.reward(problems[i], text) for i, text in zip(problem, completions)]

    class StepTimer(TrainerCallback):
        """Wall and CPU seconds from ``on_step_begin`` to ``on_step_end`` of each optimiser step."""

        def __init__(self) -> None:
            self.seconds: list[dict[str, float]] = []

        def on_train_begin(self, args, state, control, **kwargs):
            torch.set_num_threads(threads)

        def on_step_begin(self, args, state, control, **kwargs):
            self.watch = Stopwatch()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(self.watch.read())

    per_device = s.samples // s.mini_batches
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    config = GRPOConfig(
        output_dir=str(out_dir), seed=s.seed, use_cpu=True, bf16=False, report_to="none", disable_tqdm=True,
        save_strategy="no", eval_strategy="no", logging_steps=s.mini_batches, log_completions=False,
        max_steps=steps * s.mini_batches, shuffle_dataset=False, dataloader_pin_memory=False,
        per_device_train_batch_size=per_device, gradient_accumulation_steps=1, steps_per_generation=s.mini_batches,
        num_generations=s.n, max_completion_length=s.max_new_tokens, temperature=s.temperature, top_p=1.0, top_k=0,
        use_vllm=False, loss_type="dapo", beta=0.0, epsilon=s.clip_low, epsilon_high=s.clip_high, num_iterations=1,
        learning_rate=s.lr, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0,
        gradient_checkpointing=False,
    )
    timer = StepTimer()
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=config, processing_class=tokenizer, callbacks=[timer],
        train_dataset=Dataset.from_dict({"prompt": texts, "problem": indices}),
    )
    trainer.remove_callback(PrinterCallback)  # its per-step log lines would bury the table
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    assert lengths and all(x == s.max_new_tokens for x in lengths), f"TRL responses stopped early: {lengths}"
    m = s.mini_batches  # one RL step = one generation + ``mini_batches`` optimiser steps
    return {
        f"{clock}_step_s": [sum(t[clock] for t in timer.seconds[i : i + m]) for i in range(0, len(timer.seconds), m)]
        for clock in CLOCKS
    }


# ---------------------------------------------------------------------------------------------
# Generation: the hf engine against plain model.generate on the same batch.


def generation_batch(s: Settings, tokenizer: PreTrainedTokenizerBase, problems: list[Problem]) -> list[list[int]]:
    """Prompt ids of the first training step: ``batch_size`` prompts, each repeated ``n`` times."""
    formatter = PromptFormatter(tokenizer, use_chat_template=False)
    prompts = [formatter.prompt_ids(problems[i].question) for i in step_prompts(s.seed, 0, s.batch_size, len(problems))]
    return [p for p in prompts for _ in range(s.n)]


def time_engine(engine: HFEngine, prompts: list[list[int]], s: Settings, seed: int) -> dict[str, float]:
    """Wall and CPU seconds for the engine to sample ``max_new_tokens`` for every prompt."""
    params = SamplingParams(temperature=s.temperature, top_p=1.0, max_new_tokens=s.max_new_tokens, seed=seed)
    out, seconds = timed(engine.generate, [Request(p) for p in prompts], params)
    assert all(len(c.token_ids) == s.max_new_tokens for c in out)
    return seconds


def time_generate(model: PreTrainedModel, prompts: list[list[int]], pad_id: int, eos_id: int, s: Settings) -> dict[str, float]:
    """Wall and CPU seconds of one plain ``model.generate`` call (left-padded batch, KV cache, sampling)."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width) >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    with torch.inference_mode():
        out, seconds = timed(
            model.generate, ids, attention_mask=mask, do_sample=True, max_new_tokens=s.max_new_tokens,
            temperature=s.temperature, top_k=None, top_p=None, pad_token_id=pad_id, eos_token_id=eos_id,
        )
    assert out.shape == (len(prompts), width + s.max_new_tokens)
    return seconds


def bench_generation(s: Settings, model_dir: Path, problems: list[Problem], repeats: int) -> dict:
    """Interleaved repeats of engine vs generate (the order alternates); wall and CPU seconds of each."""
    model, tokenizer = load_without_eos(model_dir)
    model.eval()
    formatter = PromptFormatter(tokenizer, use_chat_template=False)
    engine = HFEngine(model, end_ids=formatter.end_ids, pad_id=formatter.pad_id, batch_size=s.samples)
    prompts = generation_batch(s, tokenizer, problems)
    sides = {
        "engine": lambda r: time_engine(engine, prompts, s, seed=r),
        "generate": lambda r: time_generate(model, prompts, formatter.pad_id, formatter.eos_id, s),
    }
    for side in sides.values():
        side(-1)  # warm-up
    seconds: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for r in range(repeats):
        for name in rotate(list(sides), r):
            seconds[name].append(sides[name](r))
    return {"batch": len(prompts), "tokens": len(prompts) * s.max_new_tokens, "seconds": seconds}


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


def plain_update(s: Settings, model_dir: Path, problems: list[Problem], repeats: int = 3) -> dict[str, float]:
    """GFLOP/s (wall and CPU) of a plain HF update of tsctl's step-0 batch: per mini-batch, ``loss.backward()`` and AdamW."""
    model, tokenizer = load_without_eos(model_dir)
    formatter = PromptFormatter(tokenizer, use_chat_template=False)
    lengths = step_lengths(s, formatter, problems, 0)
    width = max(lengths)
    ids = torch.randint(4, len(tokenizer), (len(lengths), width))
    mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=s.lr)
    mini = len(lengths) // s.mini_batches
    model.train()

    def update() -> None:
        for m in range(s.mini_batches):
            rows = slice(m * mini, (m + 1) * mini)
            optimizer.zero_grad(set_to_none=True)
            model(input_ids=ids[rows], attention_mask=mask[rows], labels=labels[rows]).loss.backward()
            optimizer.step()

    update()
    runs = [timed(update)[1] for _ in range(repeats)]
    flops = update_flops(model, lengths, lm_head_tokens=sum(lengths))
    return {clock: flops / statistics.median(t[clock] for t in runs) / 1e9 for clock in CLOCKS}


# ---------------------------------------------------------------------------------------------
# The run: rounds of interleaved measurements, then medians, spreads and the table.


def rotate(items: list, k: int) -> list:
    """``items`` rotated left by ``k``: the order of the sides changes from one round to the next."""
    k %= len(items)
    return items[k:] + items[:k]


def run_rounds(args: argparse.Namespace, s: Settings, model_dir: Path, work: Path, problems: list[Problem], console: Console) -> list[dict]:
    """All rounds of (a), (b) and (d): tsctl ratio 0, tsctl ratio 25, TRL, matmul peak, plain HF update."""
    flops_model, tokenizer = load_model(model_dir, "float32", "cpu")
    formatter = PromptFormatter(tokenizer, use_chat_template=False)

    def tsctl_side(ratio: int, r: int) -> Callable[[], dict]:
        def go() -> dict:
            out = run_tsctl(s, model_dir, work / "runs", f"ratio{ratio}-round{r}", ratio, args.steps)
            lengths = [step_lengths(s, formatter, problems, step) for step in range(args.steps)]
            assert out["train_tokens"] == [sum(x) for x in lengths], "token count differs from tsctl's own"
            head = s.samples * s.max_new_tokens
            out["update_model_gflop"] = [update_flops(flops_model, x, head) / 1e9 for x in lengths]
            out["update_gflop"] = [update_flops(flops_model, x, head, share) / 1e9 for x, share in zip(lengths, out["forward_token_share"])]
            return out

        return go

    def trl_side(r: int) -> Callable[[], dict]:
        return lambda: run_trl(s, model_dir, work / f"trl-round{r}", problems, args.steps, args.threads)

    with console.status("warm-up: a short run of each side"):
        run_tsctl(s, model_dir, work / "runs", "warmup-ratio0", 0, 2)
        run_tsctl(s, model_dir, work / "runs", "warmup-ratio25", 25, 2)
        if not args.skip_trl:
            run_trl(s, model_dir, work / "trl-warmup", problems, 1, args.threads)
    rounds = []
    for r in range(args.rounds):
        sides: dict[str, Callable[[], object]] = {
            "tsctl_ratio0": tsctl_side(0, r),
            "tsctl_ratio25": tsctl_side(25, r),
            "matmul_peak_gflops": matmul_peak,
            "shape_matmul_gflops": lambda: shape_matmul_peak(flops_model, sum(step_lengths(s, formatter, problems, 0)) // s.mini_batches),
            "plain_update_gflops": lambda: plain_update(s, model_dir, problems),
        }
        if not args.skip_trl:
            sides["trl"] = trl_side(r)
        result: dict = {}
        for name in rotate(list(sides), r):
            with console.status(f"round {r + 1}/{args.rounds}: {name}"):
                result[name], seconds = timed(sides[name])
            console.log(f"round {r + 1}/{args.rounds}: {name} in {seconds['wall']:.0f}s")
        rounds.append(result)
    return rounds


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def round_figures(r: dict, clock: str) -> dict[str, float]:
    """The figures of one round on one clock.

    Step times for (a) are per-run medians; for (b) means over the run (one refresh window), so the
    seed generation at the window's first step is amortised over its steps.
    """
    r0, r25 = r["tsctl_ratio0"], r["tsctl_ratio25"]
    fig = {
        "tsctl_step_median_s": statistics.median(r0[f"{clock}_step_s"]),
        "tsctl_ratio0_step_mean_s": mean(r0[f"{clock}_step_s"]),
        "tsctl_ratio25_step_mean_s": mean(r25[f"{clock}_step_s"]),
        "update_s": statistics.median(r0[f"{clock}_update_s"]),
        "train_tokens_per_s": statistics.median(t / u for t, u in zip(r0["train_tokens"], r0[f"{clock}_update_s"])),
        "update_gflops_per_s": statistics.median(f / u for f, u in zip(r0["update_gflop"], r0[f"{clock}_update_s"])),
        "update_model_gflops_per_s": statistics.median(f / u for f, u in zip(r0["update_model_gflop"], r0[f"{clock}_update_s"])),
        "forward_token_share": statistics.median(r0["forward_token_share"]),
        "matmul_peak_gflops": r["matmul_peak_gflops"][clock],
        "shape_matmul_gflops": r["shape_matmul_gflops"][clock],
        "plain_update_gflops_per_s": r["plain_update_gflops"][clock],
    }
    fig["b_ratio25_over_ratio0"] = fig["tsctl_ratio25_step_mean_s"] / fig["tsctl_ratio0_step_mean_s"]
    fig["d_update_share_of_peak"] = fig["update_gflops_per_s"] / fig["matmul_peak_gflops"]
    fig["plain_update_share_of_peak"] = fig["plain_update_gflops_per_s"] / fig["matmul_peak_gflops"]
    fig["shape_matmul_share_of_peak"] = fig["shape_matmul_gflops"] / fig["matmul_peak_gflops"]
    if clock == "wall":
        fig["ratio25_seeds_mean_s"] = mean(r25["wall_seeds_s"])
    if "trl" in r:
        fig["trl_step_median_s"] = statistics.median(r["trl"][f"{clock}_step_s"])
        fig["a_tsctl_over_trl"] = fig["tsctl_step_median_s"] / fig["trl_step_median_s"]
    return fig


def generation_figures(generation: dict, clock: str) -> list[dict[str, float]]:
    """Per repeat of (c): tokens/s of each side and their ratio."""
    tokens = generation["tokens"]
    return [
        {"engine_tokens_per_s": tokens / e[clock], "generate_tokens_per_s": tokens / g[clock], "c_engine_over_generate": g[clock] / e[clock]}
        for e, g in zip(generation["seconds"]["engine"], generation["seconds"]["generate"])
    ]


def summarise(rounds: list[dict], generation: dict) -> dict[str, dict[str, dict]]:
    """``{figure: {clock: {median, min, max, values}}}`` over rounds (or repeats, for (c))."""
    per_clock = {clock: [round_figures(r, clock) for r in rounds] + generation_figures(generation, clock) for clock in CLOCKS}
    order = [*TARGETS, "tsctl_step_median_s", "trl_step_median_s", "tsctl_ratio0_step_mean_s", "tsctl_ratio25_step_mean_s",
             "ratio25_seeds_mean_s", "engine_tokens_per_s", "generate_tokens_per_s", "update_s", "train_tokens_per_s",
             "update_gflops_per_s", "update_model_gflops_per_s", "forward_token_share", "matmul_peak_gflops", "plain_update_gflops_per_s", "plain_update_share_of_peak",
             "shape_matmul_gflops", "shape_matmul_share_of_peak"]
    out: dict[str, dict[str, dict]] = {}
    for name in order:
        for clock in CLOCKS:
            values = [f[name] for f in per_clock[clock] if name in f]
            if values:
                out.setdefault(name, {})[clock] = {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}
    return out


def met(name: str, value: float) -> bool:
    op, target = TARGETS[name]
    return value <= target if op == "<=" else value >= target


def print_table(console: Console, summary: dict[str, dict[str, dict]], args: argparse.Namespace) -> None:
    """One row per figure: wall and CPU medians with their min-max spread, and the verdict of the four targets."""
    table = Table(title=f"medians over {args.rounds} rounds ((c): {args.gen_repeats} repeats), min-max in brackets; {args.threads} thread(s)")
    for column in ("figure", "wall clock", "CPU time", "target (wall)"):
        table.add_column(column, justify="right" if "clock" in column or "time" in column else "left")

    def cell(stats: dict | None) -> str:
        if stats is None:
            return ""
        fmt = "{:.3f}" if abs(stats["median"]) < 100 else "{:.0f}"
        return f"{fmt.format(stats['median'])} [{fmt.format(stats['min'])}-{fmt.format(stats['max'])}]"

    for name, clocks in summary.items():
        verdict = ""
        if name in TARGETS:
            op, target = TARGETS[name]
            verdict = f"{'met' if met(name, clocks['wall']['median']) else 'MISSED'} ({op} {target:g})"
        table.add_row(name, cell(clocks.get("wall")), cell(clocks.get("cpu")), verdict)
    console.print(table)


def machine() -> dict:
    """What the numbers were measured on."""
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "cpu": platform.machine(), "cores": os.cpu_count(), "threads": torch.get_num_threads()}
    with contextlib.suppress(ImportError):
        import trl

        info["trl"] = trl.__version__
    with contextlib.suppress(OSError, StopIteration):
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    with contextlib.suppress(OSError):
        info["load_average"] = os.getloadavg()
    return info


@contextlib.contextmanager
def workdir(keep: str | None) -> Iterator[Path]:
    """``keep`` when given (created), else a temporary folder removed afterwards."""
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(keep)
    else:
        with tempfile.TemporaryDirectory(prefix="tsctl-bench-") as tmp:
            yield Path(tmp)


def profile_sides(args: argparse.Namespace, s: Settings, model_dir: Path, work: Path, problems: list[Problem], out: Path, console: Console) -> list[Path]:
    """pyinstrument call trees of short runs of each side (tsctl ratio 0 and 25, TRL), as text next to ``out``."""
    from pyinstrument import Profiler

    sides: dict[str, Callable[[], object]] = {
        "tsctl-ratio0": lambda: run_tsctl(s, model_dir, work / "runs", "profile-ratio0", 0, args.steps),
        "tsctl-ratio25": lambda: run_tsctl(s, model_dir, work / "runs", "profile-ratio25", 25, args.steps),
    }
    if not args.skip_trl:
        sides["trl"] = lambda: run_trl(s, model_dir, work / "trl-profile", problems, args.steps, args.threads)
    written = []
    for name, side in sides.items():
        with console.status(f"profiling {name}"):
            profiler = Profiler(interval=0.005)
            with profiler:
                side()
        path = out.with_name(f"{out.stem}-profile-{name}.txt")
        path.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of (a), (b), (d) (default 3)")
    parser.add_argument("--steps", type=int, default=10, help="RL steps per run and side; = refresh covers one seed window (default 10)")
    parser.add_argument("--gen-repeats", type=int, default=5, help="interleaved repeats of (c) (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same for every side (default 1)")
    parser.add_argument("--skip-trl", action="store_true", help="skip (a), e.g. when TRL is not installed")
    parser.add_argument("--workdir", default=None, help="keep run folders here (default: a temporary folder)")
    parser.add_argument("--out", default=None, help="JSON path (default: bench/results/<timestamp>.json)")
    parser.add_argument("--profile", action="store_true", help="also write pyinstrument call trees of each side (needs pyinstrument)")
    args = parser.parse_args(argv)
    if not args.skip_trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            sys.exit('TRL is not installed: pip install -e ".[bench]" (or pass --skip-trl)')
    torch.set_num_threads(args.threads)
    console = Console(width=max(Console().width, 120))
    s = Settings()
    problems = list(build_task(TsctlConfig().task).problems("train"))
    watch = Stopwatch()
    out = Path(args.out) if args.out else RESULTS / f"{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with workdir(args.workdir) as work:
        model_dir = work / "model"
        save_bench_model(model_dir, s.seed)
        with console.status("(c) engine vs model.generate"):
            generation = bench_generation(s, model_dir, problems, args.gen_repeats)
        rounds = run_rounds(args, s, model_dir, work, problems, console)
        profiles = profile_sides(args, s, model_dir, work, problems, out, console) if args.profile else []
    summary = summarise(rounds, generation)
    print_table(console, summary, args)
    report = {
        "created": dt.datetime.now().isoformat(timespec="seconds"),
        "seconds": watch.read()["wall"],
        "args": vars(args), "settings": asdict(s), "machine": machine(),
        "targets": {k: {"op": op, "value": v, "met_wall": met(k, summary[k]["wall"]["median"]), "met_cpu": met(k, summary[k]["cpu"]["median"])}
                    for k, (op, v) in TARGETS.items() if k in summary},
        "summary": summary, "generation": generation, "rounds": rounds, "profiles": [str(p) for p in profiles],
    }
    out.write_text(json.dumps(report, indent=1))
    console.print(f"wrote {out} in {report['seconds']:.0f}s")
    return report


if __name__ == "__main__":
    main()
