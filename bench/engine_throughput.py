"""Throughput of the hf engine against plain ``model.generate`` (or against real vLLM) on a random model, CPU or CUDA.

By default (CPU) a random ~3.4M-parameter Llama (hidden 192, 6 layers, 6 heads, SwiGLU 704, vocab 128,
fp32; ``--shape`` picks SmolLM2-135M's or Qwen2.5-0.5B's shape instead)
samples 128 sequences x 48 new tokens from left-padded prompts of 14-18 tokens (``--prompt-tokens N``: N to N + 4),
in two layouts:
16 prompts x 8 samples (the RL case; the engine prefills each prompt once) and 128 distinct prompts.
No EOS stops a row, so both sides decode exactly the same number of tokens. The two sides are
interleaved and the median over the repeats is reported with the min-max spread, and the time per
decode step (a whole batch's token).

On CUDA the default is Qwen2.5-0.5B's shape (random init, fp32 weights) with bf16 autocast around both
sides, as ``tsctl train`` samples on a GPU: what the engine costs there against HF's own loop.

``--against vllm`` times tsctl's ``vllm`` engine (real vLLM: its CPU build here, float32, compiled as a
run's engine is, its KV cache sized as on the CPU) on the same model, saved to a folder with a
character tokenizer that has no EOS (so no row stops early), in place of ``model.generate``.

    python bench/engine_throughput.py [--repeats 7] [--threads 2]
    python bench/engine_throughput.py --against vllm [--shape smollm-135m|qwen2-0.5b]
    python bench/engine_throughput.py --device cuda --new-tokens 256 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src"
if (SOURCE / "tsctl").is_dir():  # time this checkout's engine, installed or not
    sys.path.insert(0, str(SOURCE))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

from tsctl.engines.base import Request, SamplingParams  # noqa: E402
from tsctl.engines.hf import HFEngine  # noqa: E402
from tsctl.models.tokenizer import build_char_tokenizer  # noqa: E402

PAD = 0

SHAPES = {
    "tiny-llama": (LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=192, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=6, intermediate_size=704, vocab_size=128)),
    "smollm-135m": (LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536,
        vocab_size=49152, tie_word_embeddings=True)),
    "qwen2-0.5b": (Qwen2Config, Qwen2ForCausalLM, dict(
        hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864,
        vocab_size=151936, tie_word_embeddings=True)),
}
"""Model shapes: a tiny Llama (the built-in model's size), SmolLM2-135M's and Qwen2.5-0.5B's (random weights)."""


def build_model(shape: str, device: str, context: int) -> PreTrainedModel:
    """A random-init model of ``shape`` (fp32) on ``device`` with room for ``context`` positions."""
    config_class, model_class, sizes = SHAPES[shape]
    config = config_class(**sizes, max_position_embeddings=context, pad_token_id=PAD, bos_token_id=1, eos_token_id=None)
    with torch.device(device):
        return model_class(config).float().eval()


def make_prompts(groups: int, samples: int, shortest: int = 14) -> list[list[int]]:
    """``groups`` random prompts of ``shortest`` to ``shortest + 4`` tokens, each repeated ``samples // groups`` times."""
    prompts = [torch.randint(3, 128, (int(torch.randint(shortest, shortest + 5, ())),)).tolist() for _ in range(groups)]
    return [p for p in prompts for _ in range(samples // groups)]


def _timed(device: torch.device, run) -> tuple[float, object]:
    """Seconds of ``run()`` (the device's queued work included) and its result."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, result


def time_engine(engine, prompts: list[list[int]], new_tokens: int, device: torch.device) -> float:
    """Seconds of one ``engine.generate`` of the prompts (any tsctl engine), every row decoding ``new_tokens``."""
    requests = [Request(p) for p in prompts]
    elapsed, completions = _timed(device, lambda: engine.generate(requests, SamplingParams(max_new_tokens=new_tokens)))
    assert all(len(c.token_ids) == new_tokens for c in completions)
    return elapsed


def time_generate(model: PreTrainedModel, prompts: list[list[int]], new_tokens: int, dtype: torch.dtype) -> float:
    """``model.generate`` on the left-padded prompts, under autocast to ``dtype`` when it is not float32."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    autocast = torch.autocast(model.device.type, dtype) if dtype != torch.float32 else contextlib.nullcontext()

    def run():
        with torch.inference_mode(), autocast:
            return model.generate(
                ids, attention_mask=mask, do_sample=True, max_new_tokens=new_tokens, pad_token_id=PAD,
                top_k=None, top_p=None, temperature=1.0,
            )

    elapsed, out = _timed(model.device, run)
    assert out.shape == (len(prompts), width + new_tokens)
    return elapsed


def vllm_engine(model: PreTrainedModel, samples: int, folder: Path):
    """tsctl's vllm engine over ``model`` saved to ``folder`` (float32 on the CPU), with a tokenizer without EOS."""
    from tsctl.engines import vllm_sizing
    from tsctl.engines.vllm import VLLMEngine

    tokenizer = build_char_tokenizer(model.config.vocab_size)
    tokenizer.eos_token = None
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    context = model.config.max_position_embeddings
    dtype = "float32" if model.device.type == "cpu" else "bfloat16"
    return VLLMEngine(
        str(folder), (), dtype=dtype, max_model_len=context, max_num_seqs=samples, enable_sleep_mode=False,
        kv_cache_bytes=vllm_sizing.cpu_kv_cache_bytes(model.config, dtype, context, samples),
    )


def summary(name: str, seconds: list[float], samples: int, new_tokens: int) -> float:
    rates = sorted(samples * new_tokens / s for s in seconds)
    median = statistics.median(rates)
    step_ms = 1000 * statistics.median(seconds) / new_tokens
    print(f"  {name:<16} {median:8.0f} tok/s  (min {rates[0]:.0f}, max {rates[-1]:.0f})  {step_ms:6.2f} ms per decode step")
    return median


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if cuda else "cpu")
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None, help="model shape (default: qwen2-0.5b on cuda, tiny-llama on cpu)")
    parser.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default=None,
                        help="autocast dtype of both sides (default: bfloat16 on cuda, float32 on cpu)")
    parser.add_argument("--samples", type=int, default=128, help="sequences per batch (a multiple of 8)")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--prompt-tokens", type=int, default=14, help="shortest prompt (prompts have 4 tokens more at most)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--against", choices=["generate", "vllm"], default="generate",
                        help="the other side: HF's model.generate, or tsctl's vllm engine (real vLLM)")
    args = parser.parse_args(argv)
    on_gpu = args.device == "cuda"
    args.shape = args.shape or ("qwen2-0.5b" if on_gpu else "tiny-llama")
    args.compute_dtype = args.compute_dtype or ("bfloat16" if on_gpu else "float32")
    if on_gpu and not cuda:
        parser.error("--device cuda but torch sees no CUDA device; use --device cpu")
    if args.samples < 8 or args.samples % 8:
        parser.error(f"--samples {args.samples}: a multiple of 8 (one layout is samples // 8 prompts x 8 samples each)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, args.compute_dtype)
    model = build_model(args.shape, args.device, context=args.prompt_tokens + 50 + args.new_tokens)
    engine = HFEngine(model, end_ids=-1, pad_id=PAD, batch_size=args.samples, compute_dtype=dtype)
    print(f"model: {args.shape}, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params on {args.device}, "
          f"compute {args.compute_dtype}, {args.samples} sequences x {args.new_tokens} new tokens after {args.prompt_tokens}+ prompt tokens, "
          f"{args.threads} threads, {args.repeats} repeats")
    with tempfile.TemporaryDirectory() as folder:
        if args.against == "vllm":
            other = vllm_engine(model, args.samples, Path(folder))
            name, run_other = "vllm engine", lambda prompts: time_engine(other, prompts, args.new_tokens, engine.device)
        else:
            name, run_other = "model.generate", lambda prompts: time_generate(model, prompts, args.new_tokens, dtype)
        for groups in (args.samples // 8, args.samples):
            prompts = make_prompts(groups, args.samples, args.prompt_tokens)
            time_engine(engine, prompts, args.new_tokens, engine.device)  # warm-up
            run_other(prompts)
            ours, theirs = [], []
            for _ in range(args.repeats):
                ours.append(time_engine(engine, prompts, args.new_tokens, engine.device))
                theirs.append(run_other(prompts))
            print(f"{groups} prompts x {args.samples // groups} samples:")
            ratio = summary("hf engine", ours, args.samples, args.new_tokens) / summary(name, theirs, args.samples, args.new_tokens)
            per_repeat = sorted(t / o for o, t in zip(ours, theirs))
            print(f"  hf / {name:<10} {ratio:8.2f}x  (per repeat: min {per_repeat[0]:.2f}x, max {per_repeat[-1]:.2f}x)")


if __name__ == "__main__":
    main()
