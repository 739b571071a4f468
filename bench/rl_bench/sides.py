"""The compared sides: tsctl's training loop, TRL's GRPOTrainer, tsctl's ``hf`` engine and plain ``model.generate``.

Every side loads the same saved model with its EOS logit suppressed, so every response is exactly
``max_new_tokens`` long (equal work on every side).
"""

from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence
from unittest import mock

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import tsctl.trainer.optim
import tsctl.trainer.step
from rl_bench.settings import CLOCKS, Settings
from rl_bench.timing import Stopwatch, rotate, step_lengths, timed, update_flops
from tsctl.config.schema import TinyModelConfig
from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.hf import HFEngine
from tsctl.io.runs import locate_run
from tsctl.models.loading import load_model
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.bank import SeedBank
from tsctl.runconfig import compose_config
from tsctl.tasks.base import Problem, Task
from tsctl.tasks.registry import build_task
from tsctl.tasks.schedule import step_prompts
from tsctl.trainer.learner import Learner

# ---------------------------------------------------------------------------------------------
# The model: built by tsctl's own builders, saved once, loaded by every side with EOS suppressed.


def save_bench_model(folder: Path, seed: int) -> None:
    """Build the default tiny Llama and the character tokenizer and save both to ``folder``."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(), tokenizer, seed=seed)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def bench_task(s: Settings) -> Task:
    """The task every side trains on: the default task with ``s.task``'s overrides, as the runs compose it."""
    return build_task(compose_config(list(s.task)).cfg.task)


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
# tsctl: the trainer's own setup and steps, in process.


def tsctl_overrides(
    s: Settings, model_dir: Path, runs_dir: Path, name: str, ratio: int, steps: int, compiled: bool = False, extra: Sequence[str] = (),
) -> list[str]:
    """Hydra overrides for a ``tsctl train`` run with settings ``s`` and no evals or intermediate checkpoints (``compiled``:
    ``trainer.compile``), then ``extra`` (an arena entry's)."""
    return [f"trainer.compile={str(compiled).lower()}",
        f"model.path={model_dir}", "model.dtype=float32", "model.device=cpu", f"runs_dir={runs_dir}", f"name={name}",
        f"seed={s.seed}", f"ratio={ratio}", f"refresh={s.refresh}", *s.task, "algo=dapo",
        f"algo.clip_low={s.clip_low}", f"algo.clip_high={s.clip_high}",
        f"engine.max_new_tokens={s.max_new_tokens}", f"engine.temperature={s.temperature}", "engine.top_p=1.0",
        f"trainer.steps={steps}", f"trainer.batch_size={s.batch_size}", f"trainer.n={s.n}",
        f"trainer.mini_batches={s.mini_batches}", "trainer.micro_batch_size=0", f"trainer.lr={s.lr}",
        "trainer.eval_every=0", f"trainer.save_every={steps + 1}", "trainer.keep_checkpoints=1", *extra,
    ]


def run_tsctl(
    s: Settings, model_dir: Path, runs_dir: Path, name: str, ratio: int, steps: int, compiled: bool = False, extra: Sequence[str] = (),
) -> dict[str, list[float]]:
    """Run tsctl's training loop in process for ``steps`` steps (``extra``: overrides after the bench's): the trainer's
    :func:`~tsctl.trainer.step.setup`, then :func:`~tsctl.trainer.step.run_step` per step; per step, its wall times
    (from the metric records) and CPU times.
    With ``compiled`` (``trainer.compile``) also the seconds each step spent compiling: the process keeps what it
    compiled, so only its first compiled run compiles.

    CPU seconds are taken around the step's own calls: ``SeedBank.prepare`` and ``train_step`` make up
    a step (as ``time/step`` does), ``Learner.update`` is the update phase (as ``time/update``).
    """
    composed = compose_config(tsctl_overrides(s, model_dir, runs_dir, name, ratio, steps, compiled, extra))
    cfg = composed.cfg
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

    # Patched where run_step and train_step look them up.
    patches = [
        mock.patch.object(tsctl.trainer.optim, "load_model", load_without_eos),
        mock.patch.object(tsctl.trainer.step, "train_step", clocked("step", tsctl.trainer.step.train_step, lambda step, *_: step)),
        mock.patch.object(SeedBank, "prepare", clocked("step", SeedBank.prepare, lambda bank, step, *_: step)),
        mock.patch.object(Learner, "update", clocked("update", Learner.update, lambda *_: 0)),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        ctx = tsctl.trainer.step.setup(cfg, str(model_dir), str(model_dir), locate_run(cfg, composed.node, "train"))
        torch.manual_seed(cfg.seed)
        records = [tsctl.trainer.step.run_step(step, ctx) for step in range(steps)]
    assert all(r["response_length/mean"] == s.max_new_tokens for r in records), "a response stopped early"
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
        "wall_compile_s": [r.get("time/compile", 0.0) for r in records],
    }


# ---------------------------------------------------------------------------------------------
# TRL's GRPOTrainer on the same model, prompts and settings.


def run_trl(s: Settings, model_dir: Path, out_dir: Path, problems: list[Problem], steps: int, threads: int) -> dict[str, list[float]]:
    """Train TRL's GRPOTrainer for ``steps`` RL steps; wall and CPU seconds of each (start-up excluded)."""
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = load_without_eos(model_dir)
    task = bench_task(s)
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
