"""One-command check of tsctl's GPU path: a few Thinking Seeds steps of a Qwen2-shaped model on CUDA.

Needs only torch, transformers and what tsctl's train step imports (numpy, pyarrow, rich): no
Hydra, no model hub, no vLLM, no download. It builds a random-init model shaped like Qwen2.5-0.5B
(24 layers, width 896, 14 heads / 2 key-value heads, vocabulary 151,936, tied embeddings) and a
character tokenizer padded to that vocabulary (``tsctl.models.tokenizer``), saves both to a
temporary folder, then runs tsctl's own train step (:func:`tsctl.trainer.step.run_step`, with the seed
bank, the ``hf`` engine and the run's :class:`~tsctl.trainer.learner.Learner`, built as ``tsctl train`` builds it) for a few
``ratio=25`` steps: fp32 master weights, bf16 autocast, gradient checkpointing, packed token-budget
micro-batches (``trainer.pack``; ``--no-pack`` for padded rows), pi_old recomputed (so the
engine-vs-trainer log-prob gap is measured every step).

A random model never solves a problem, so every reward would be 0 and no gradient would flow: the
task's verifier is replaced by a coin flip keyed on the response text (deterministic), which gives
non-zero advantages. Nothing here measures learning; it checks that the machinery runs and moves
the weights, and measures its speed.

Printed at the end, on stdout, as one JSON object (the same keys on CPU and GPU):

- ``ok``: every step ran, every loss and gradient norm was finite, the parameters changed, and the
  process-group backend all-reduced its tensors (``process_group``);
- ``steps_done``, ``loss_finite``, ``parameters_changed``, ``changed_fraction``, ``max_abs_change``;
- ``logprob_gap``: the engine's log-probs of its sampled tokens against the trainer's recompute
  (``abs_mean``, ``abs_max``, signed ``mean``, ``ratio_mean`` of ``exp(engine - trainer)``);
- ``rollout_tokens_per_s``, ``update_tokens_per_s`` (medians over the steps);
- ``peak_memory_gib`` (CUDA: ``torch.cuda.max_memory_allocated``; CPU: peak resident set);
- ``compile_seconds``, ``compile_graphs``: with ``--compile`` (``trainer.compile``: the update's decoder layers
  compiled, :mod:`tsctl.models.compiled`), the seconds the update spent compiling (mostly the first step's,
  which the medians above leave out once there are 3 steps or more) and the graphs compiled; ``null`` without;
- ``update_mfu``: model FLOPs of the update (``6 P_layers sum l + 12 L d sum l^2 + 6 d V R`` for rows
  of ``l`` tokens and ``R`` response tokens; recomputation and padding not counted) per second of
  ``time/update``, over ``peak_tflops`` (the device's dense bf16 peak when known, else a measured
  matmul peak, ``peak_source`` says which);
- ``process_group``: the backend ``torchrun`` jobs use on this device (:func:`tsctl.distributed.world.backend`)
  in a one-rank group, and whether it all-reduced a CPU tensor (metric sums) and, on CUDA, a GPU tensor (FSDP's);
- ``per_step``, ``vllm`` (a short run with the vLLM engine, only when vLLM is importable),
  ``seconds``, ``error`` (``null``, or the exception and the end of its traceback).

    python bench/gpu_check.py                                 # CUDA, 0.5B model, a few minutes on an H200
    python bench/gpu_check.py --device cpu --size tiny        # seconds, on any machine
    python bench/gpu_check.py --size 1.5b --compile           # the update compiled (run it beside one without)

It checks the code of the checkout it sits in (it puts the checkout's ``src/`` first on the path), so it
runs from a checkout that was never installed too.

Exit status 0 when ``ok``, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

os.environ.setdefault("TSCTL_NO_PROGRESS", "1")
SOURCE = Path(__file__).resolve().parents[1] / "src"
if (SOURCE / "tsctl").is_dir():  # check this checkout's code, installed or not
    sys.path.insert(0, str(SOURCE))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from tsctl.config.knobs import uses_seeds  # noqa: E402
from tsctl.config.schema import TsctlConfig  # noqa: E402
from tsctl.distributed.world import backend  # noqa: E402
from tsctl.engines.factory import build_engine  # noqa: E402
from tsctl.io.shards import read_shard  # noqa: E402
from tsctl.models.precision import compute_dtype  # noqa: E402
from tsctl.models.prompts import PromptFormatter  # noqa: E402
from tsctl.models.tokenizer import build_char_tokenizer  # noqa: E402
from tsctl.seeds.bank import SeedBank  # noqa: E402
from tsctl.tasks.base import Problem  # noqa: E402
from tsctl.tasks.registry import build_task  # noqa: E402
from tsctl.trainer.context import StepContext  # noqa: E402
from tsctl.trainer.learner import Learner, parallel_policy  # noqa: E402
from tsctl.trainer.rollout import Sampler  # noqa: E402
from tsctl.trainer.step import run_step  # noqa: E402

SIZES: dict[str, dict[str, int]] = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, vocab_size=151936),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, vocab_size=151936),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, vocab_size=8192),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=512),
}
"""Model shapes: ``0.5b`` is Qwen2.5-0.5B's, ``1.5b`` Qwen2.5-Math-1.5B's (the ``qwen2.5-math-1.5b`` preset's
model, for its memory); ``small`` and ``tiny`` are for CPU runs."""

PEAK_BF16_TFLOPS = {"H200": 989.4, "H100 PCIe": 756.0, "H100": 989.4, "H800": 989.4, "A100": 312.0, "L40S": 362.0}
"""Dense bf16 tensor-core peaks by device name (first match wins), for MFU."""


class CoinTask:
    """The arithmetic task's prompts, scored by a coin flip keyed on the response text (deterministic)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.answer_marker = inner.answer_marker

    def problems(self, split: str):
        return self.inner.problems(split)

    def reward(self, problem: Problem, response: str) -> float:
        return float(zlib.crc32(response.encode()) & 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if cuda else "cpu")
    parser.add_argument("--size", choices=sorted(SIZES), default=None, help="model shape (default: 0.5b on cuda, tiny on cpu)")
    parser.add_argument("--steps", type=int, default=None, help="train steps (default: 4 on cuda, 2 on cpu)")
    parser.add_argument("--batch-size", type=int, default=None, help="prompts per step (default: 16 on cuda, 2 on cpu)")
    parser.add_argument("--n", type=int, default=None, help="samples per prompt (default: 8 on cuda, 4 on cpu)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="response budget (default: 256 on cuda, 8 on cpu)")
    parser.add_argument("--micro-batch-tokens", type=int, default=16384, help="trainer.micro_batch_tokens")
    parser.add_argument("--micro-batch-size", type=int, default=0, help="trainer.micro_batch_size (0: by tokens alone)")
    parser.add_argument("--pack", action=argparse.BooleanOptionalAction, default=True, help="trainer.pack: padding-free micro-batches (default on)")
    parser.add_argument("--ratio", type=float, default=25.0, help="off-policy ratio (0: no seeds, half the generation)")
    parser.add_argument("--time-budget", type=float, default=420.0, help="seconds; a step that would end past them is not started")
    parser.add_argument("--compile", action="store_true", help="trainer.compile: compile the update's decoder layers (torch.compile)")
    parser.add_argument("--skip-vllm", action="store_true", help="skip the vLLM run even when vLLM is importable")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON to this file")
    args = parser.parse_args(argv)
    on_gpu = args.device == "cuda"
    defaults = {"size": "0.5b" if on_gpu else "tiny", "steps": 4 if on_gpu else 2, "batch_size": 16 if on_gpu else 2,
                "n": 8 if on_gpu else 4, "max_new_tokens": 256 if on_gpu else 8}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if on_gpu and not cuda:
        parser.error("--device cuda but torch sees no CUDA device; use --device cpu")
    return args


def build_model(size: str, folder: Path, device: str) -> dict[str, Any]:
    """Save a random-init Qwen2-shaped model of ``size`` and its tokenizer to ``folder``; describe it."""
    shape = SIZES[size]
    tokenizer = build_char_tokenizer(shape["vocab_size"])
    config = Qwen2Config(
        **shape, max_position_embeddings={"0.5b": 32768, "1.5b": 4096}.get(size, 1024), rope_theta=1_000_000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).float()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    layers = sum(p.numel() for p in model.model.layers.parameters())
    return {"size": size, "parameters": sum(p.numel() for p in model.parameters()), "layer_parameters": layers,
            "layers": shape["num_hidden_layers"], "hidden": shape["hidden_size"], "vocab_size": shape["vocab_size"]}


def make_config(args: argparse.Namespace, model_dir: Path, engine: str = "hf") -> TsctlConfig:
    """The run's config, built on the schema (no Hydra needed; the tests validate it, which needs OmegaConf)."""
    cfg = TsctlConfig(ratio=args.ratio, refresh=2, truncation="uniform", seed=0)
    cfg.model.path, cfg.model.device, cfg.model.use_chat_template = str(model_dir), args.device, False
    cfg.task.name, cfg.task.train_size, cfg.task.heldout_size = "arithmetic", 2000, 100
    e = cfg.engine
    e.name, e.temperature, e.max_new_tokens = engine, 1.0, args.max_new_tokens
    tr = cfg.trainer
    tr.steps, tr.batch_size, tr.n, tr.mini_batches = args.steps, args.batch_size, args.n, 2
    tr.lr, tr.warmup_steps, tr.old_logprobs = 1e-6, 0, "recompute"
    tr.gradient_checkpointing, tr.micro_batch_tokens, tr.micro_batch_size = True, args.micro_batch_tokens, args.micro_batch_size
    tr.pack, tr.compile = args.pack, args.compile
    tr.eval_every = 0
    return cfg


def update_flops(model: dict[str, Any], rows: list[tuple[int, int]]) -> float:
    """Model FLOPs of one forward + backward over ``rows`` of (prompt, response) tokens."""
    lengths = [p + r for p, r in rows]
    responses = sum(r for _, r in rows)
    d = model["hidden"]
    return (6 * model["layer_parameters"] * sum(lengths) + 12 * model["layers"] * d * sum(l * l for l in lengths)
            + 6 * d * model["vocab_size"] * responses)


def peak_tflops(device: str) -> tuple[float, str, float]:
    """(peak TFLOP/s for MFU, where it comes from, measured matmul TFLOP/s)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    size, repeats = (4096, 20) if device == "cuda" else (512, 5)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    _sync(device)
    measured = 2 * size**3 * repeats / (time.perf_counter() - start) / 1e12
    if device == "cuda":
        name = torch.cuda.get_device_name()
        for key, value in PEAK_BF16_TFLOPS.items():
            if key in name:
                return value, f"nominal dense bf16 of {name}", measured
    return measured, f"measured {'bf16' if device == 'cuda' else 'fp32'} {size}x{size} matmul", measured


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_memory_gib(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def run_steps(args: argparse.Namespace, cfg: TsctlConfig, model_info: dict, work: Path, started: float) -> dict[str, Any]:
    """Train ``cfg.trainer.steps`` steps with tsctl's train step; return what the JSON reports."""
    parallel, tokenizer = parallel_policy(cfg, cfg.model.path, cfg.model.path)
    model = parallel.model
    formatter = PromptFormatter(tokenizer, cfg.model.use_chat_template)
    task = CoinTask(build_task(cfg.task))
    problems = list(task.problems("train"))
    engine = build_engine(cfg.engine, parallel.inference, formatter.end_ids, formatter.pad_id, cfg.model.path, seed=cfg.seed, compute_dtype=compute_dtype(cfg, model))
    learner = Learner(cfg, parallel, tokenizer, engine, cfg.model.path)  # as tsctl train builds it: after the engine
    seeds = SeedBank(work / f"seeds-{cfg.engine.name}", cfg, formatter, task, problems, work / f"checkpoints-{cfg.engine.name}", cfg.model.path) if uses_seeds(cfg) else None
    rollouts = work / f"rollouts-{cfg.engine.name}"
    ctx = StepContext(cfg, Sampler(engine, formatter, task, problems=problems), learner, seeds, rollouts)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    peak, peak_source, measured = peak_tflops(args.device)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    records, per_step = [], []
    for step in range(cfg.trainer.steps):
        last = per_step[-1]["seconds"] if per_step else 0.0
        if step and time.perf_counter() - started + 1.2 * last > args.time_budget:
            break  # another step would overrun the budget (the steps after a refresh cost about the same)
        t0 = time.perf_counter()
        record = run_step(step, ctx)
        shard = read_shard(rollouts / f"step-{step + 1:06d}.parquet", "rollout").table.to_pydict()
        rows = [(len(p), len(r)) for p, r in zip(shard["prompt_ids"], shard["response_ids"])]
        flops = update_flops(model_info, rows) * cfg.trainer.epochs
        tflops = flops / max(record["time/update"], 1e-9) / 1e12
        records.append(record)
        per_step.append({
            "step": step + 1, "seconds": time.perf_counter() - t0, "time_generate": record["time/generate"],
            "time_update": record["time/update"], "rollout_tokens_per_s": record["generate_tokens_per_s"],
            "update_tokens_per_s": record["train_tokens_per_s"], "update_tflops": tflops, "time_compile": record.get("time/compile"),
            "pg_loss": record.get("pg_loss"), "grad_norm": record.get("grad_norm"),
            "logprob_gap_abs_mean": record.get("logprob_gap/abs_mean"), "reward_mean": record["reward/mean"],
            "peak_memory_gib": peak_memory_gib(args.device),  # so far: a run stopped later still tells it
        })
        print(f"step {step + 1}: {json.dumps(per_step[-1])}", file=sys.stderr, flush=True)
    after = model.state_dict()
    changed = sum(int((before[k] != after[k]).sum()) for k in before)
    total = sum(v.numel() for v in before.values())
    finite = all(math.isfinite(r.get(k, float("nan"))) for r in records for k in ("pg_loss", "grad_norm"))
    gaps = [r for r in records if "logprob_gap/abs_mean" in r]
    update_tflops = statistics.median(s["update_tflops"] for s in per_step) if per_step else None
    return {
        "steps_done": len(records),
        "loss_finite": bool(records) and finite,
        "parameters_changed": changed > 0,
        "changed_fraction": changed / total,
        "max_abs_change": max(float((before[k] - after[k]).abs().max()) for k in before),
        "logprob_gap": {
            "abs_mean": statistics.fmean(r["logprob_gap/abs_mean"] for r in gaps) if gaps else None,
            "abs_max": max(r["logprob_gap/abs_max"] for r in gaps) if gaps else None,
            "mean": statistics.fmean(r["logprob_gap/mean"] for r in gaps) if gaps else None,
            "ratio_mean": statistics.fmean(r["logprob_gap/ratio_mean"] for r in gaps) if gaps else None,
        },
        "rollout_tokens_per_s": statistics.median(s["rollout_tokens_per_s"] for s in per_step) if per_step else None,
        "update_tokens_per_s": statistics.median(s["update_tokens_per_s"] for s in per_step) if per_step else None,
        "update_tflops": update_tflops,
        "update_mfu": update_tflops / peak if update_tflops is not None else None,
        "peak_tflops": peak,
        "peak_source": peak_source,
        "matmul_tflops": measured,
        "peak_memory_gib": peak_memory_gib(args.device),
        "compile_seconds": sum(r["time/compile"] for r in records) if learner.compiled is not None else None,
        "compile_graphs": records[-1]["compile/graphs"] if learner.compiled is not None and records else None,
        "per_step": per_step,
    }


def vllm_run(args: argparse.Namespace, model_dir: Path, model_info: dict, work: Path, started: float) -> dict[str, Any]:
    """Two steps with the vLLM engine (its log-probs against the trainer's recompute), when vLLM is importable."""
    if args.skip_vllm or args.device != "cuda":
        return {"skipped": "--skip-vllm" if args.skip_vllm else "cpu run"}
    if importlib.util.find_spec("vllm") is None:
        return {"skipped": "vllm is not importable"}
    if time.perf_counter() - started > args.time_budget - 180:
        return {"skipped": "not enough of the time budget left"}
    import vllm

    try:
        cfg = make_config(args, model_dir, engine="vllm")
        cfg.trainer.steps = 2
        out = run_steps(args, cfg, model_info, work, started)
        return {"version": vllm.__version__, **out}
    except Exception as err:  # reported, never fatal: the hf run above is the check
        return {"version": vllm.__version__, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-2000:]}


def process_group_check(device: str) -> dict[str, Any]:
    """A one-rank process group on the backend a ``torchrun`` job on ``device`` joins: does it all-reduce the
    tensors the trainer hands it, on the CPU and (CUDA) on the GPU?"""
    import torch.distributed as dist

    name = backend(device == "cuda")
    dist.init_process_group(name, store=dist.HashStore(), rank=0, world_size=1)
    try:
        on = {"cpu": torch.ones(2, dtype=torch.float64)} | ({"cuda": torch.ones(2, device="cuda")} if device == "cuda" else {})
        for tensor in on.values():
            dist.all_reduce(tensor)
        return {"backend": name, **{f"{where}_all_reduce": bool(t.sum().item() == 2) for where, t in on.items()}}
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "ok": False, "device": args.device, "device_name": torch.cuda.get_device_name() if args.device == "cuda" else (platform.processor() or platform.machine()),
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "model": None,
        "steps_requested": args.steps, "steps_done": 0, "loss_finite": False, "parameters_changed": False,
        "changed_fraction": None, "max_abs_change": None, "logprob_gap": None, "rollout_tokens_per_s": None,
        "update_tokens_per_s": None, "update_tflops": None, "update_mfu": None, "peak_tflops": None, "peak_source": None,
        "matmul_tflops": None, "peak_memory_gib": None, "compile_seconds": None, "compile_graphs": None, "process_group": None, "per_step": [], "vllm": None, "seconds": {}, "error": None,
    }
    with tempfile.TemporaryDirectory(prefix="tsctl-gpu-check-") as tmp, contextlib.redirect_stdout(sys.stderr):
        work = Path(tmp)
        try:
            result["model"] = build_model(args.size, work / "model", args.device)
            result["seconds"]["build"] = time.perf_counter() - started
            cfg = make_config(args, work / "model")
            result.update(run_steps(args, cfg, result["model"], work, started))
            result["seconds"]["train"] = time.perf_counter() - started - result["seconds"]["build"]
            result["process_group"] = process_group_check(args.device)
            reduced = all(v for k, v in result["process_group"].items() if k.endswith("_all_reduce"))
            result["ok"] = result["steps_done"] == args.steps and result["loss_finite"] and result["parameters_changed"] and reduced
            if args.device == "cuda":
                torch.cuda.empty_cache()
            result["vllm"] = vllm_run(args, work / "model", result["model"], work, started)
        except Exception as err:
            result["error"] = f"{type(err).__name__}: {err}"
            result["traceback"] = traceback.format_exc()[-4000:]
    result["seconds"]["total"] = time.perf_counter() - started
    text = json.dumps(result)
    print(text, flush=True)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
