"""Throughput of the hf engine against plain ``model.generate`` on a tiny Llama, CPU, 2 threads.

A random ~3.4M-parameter Llama (hidden 192, 6 layers, 6 heads, SwiGLU 704, vocab 128, fp32) samples
128 sequences x 48 new tokens from left-padded prompts of 14-18 tokens, in two layouts: 16 prompts x 8
samples (the RL case; the engine prefills each prompt once) and 128 distinct prompts. No EOS stops a
row, so both sides decode exactly the same number of tokens. The two sides are interleaved and the
median over the repeats is reported with the min-max spread.

    python bench/engine_throughput.py [--repeats 7] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tsctl.engines.base import Request, SamplingParams
from tsctl.engines.hf import HFEngine

PAD, SAMPLES, NEW_TOKENS = 0, 128, 48


def build_model() -> LlamaForCausalLM:
    config = LlamaConfig(
        hidden_size=192, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=6,
        intermediate_size=704, vocab_size=128, max_position_embeddings=256,
        pad_token_id=PAD, bos_token_id=1, eos_token_id=None,
    )
    return LlamaForCausalLM(config).eval()


def make_prompts(groups: int) -> list[list[int]]:
    """``groups`` random prompts of 14-18 tokens, each repeated SAMPLES // groups times."""
    prompts = [torch.randint(3, 128, (int(torch.randint(14, 19, ())),)).tolist() for _ in range(groups)]
    return [p for p in prompts for _ in range(SAMPLES // groups)]


def time_engine(engine: HFEngine, prompts: list[list[int]]) -> float:
    requests = [Request(p) for p in prompts]
    start = time.perf_counter()
    completions = engine.generate(requests, SamplingParams(max_new_tokens=NEW_TOKENS))
    elapsed = time.perf_counter() - start
    assert all(len(c.token_ids) == NEW_TOKENS for c in completions)
    return elapsed


def time_generate(model: LlamaForCausalLM, prompts: list[list[int]]) -> float:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=mask, do_sample=True, max_new_tokens=NEW_TOKENS, pad_token_id=PAD,
            top_k=None, top_p=None, temperature=1.0,
        )
    elapsed = time.perf_counter() - start
    assert out.shape == (len(prompts), width + NEW_TOKENS)
    return elapsed


def summary(name: str, seconds: list[float]) -> float:
    rates = sorted(SAMPLES * NEW_TOKENS / s for s in seconds)
    median = statistics.median(rates)
    print(f"  {name:<16} {median:8.0f} tok/s  (min {rates[0]:.0f}, max {rates[-1]:.0f})")
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build_model()
    engine = HFEngine(model, end_ids=-1, pad_id=PAD, batch_size=SAMPLES)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M params, "
          f"{SAMPLES} sequences x {NEW_TOKENS} new tokens, {args.threads} threads, {args.repeats} repeats")
    for groups in (SAMPLES // 8, SAMPLES):
        prompts = make_prompts(groups)
        time_engine(engine, prompts)  # warm-up
        time_generate(model, prompts)
        ours, theirs = [], []
        for _ in range(args.repeats):
            ours.append(time_engine(engine, prompts))
            theirs.append(time_generate(model, prompts))
        print(f"{groups} prompts x {SAMPLES // groups} samples:")
        ratio = summary("hf engine", ours) / summary("model.generate", theirs)
        per_repeat = sorted(t / o for o, t in zip(ours, theirs))
        print(f"  speed-up        {ratio:8.2f}x  (per repeat: min {per_repeat[0]:.2f}x, max {per_repeat[-1]:.2f}x)")


if __name__ == "__main__":
    main()
