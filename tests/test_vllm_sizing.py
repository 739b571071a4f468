"""How large the vllm engine is made for a command: its context from the longest prompt, its sequences from the
requests a command sends, its CPU KV cache, and the one-line refusal (naming what fits) when that cache would not fit."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from fakes.qwen import qwen_like_tokenizer
from tsctl.config.errors import ConfigError
from tsctl.distributed.world import SINGLE, World
from tsctl.engines import vllm_platform, vllm_sizing
from tsctl.engines.base import Demand
from tsctl.models.prompts import PromptFormatter
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task
from tsctl.trainer.demand import train_demand

GIB = 1 << 30


@pytest.fixture(autouse=True)
def on_the_cpu(monkeypatch):
    monkeypatch.setattr(vllm_platform, "on_cuda", lambda: False)


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    """SmolLM2-135M's attention layout (30 layers, 3 key-value heads of 64) on a small vocabulary, context 8192."""
    config = LlamaConfig(
        vocab_size=64, hidden_size=576, intermediate_size=64, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        max_position_embeddings=8192,
    )
    with torch.device("meta"):
        return LlamaForCausalLM(config)



def sized(cfg, *args, **kwargs):
    """:func:`tsctl.engines.vllm_sizing.size` with the engine config's own ``engine.vllm.max_model_len``."""
    return vllm_sizing.size(cfg, cfg.vllm.max_model_len, *args, **kwargs)

def engine_cfg(*overrides: str):
    return compose_config(["engine=vllm", *overrides]).cfg.engine


TOKEN = 2 * 30 * 3 * 64 * 4
"""Bytes of keys and values per token of the model above, in float32."""


def test_a_token_takes_keys_and_values_of_every_layer_and_the_cache_holds_whole_blocks(model):
    assert vllm_sizing.token_bytes(model.config, "float32") == TOKEN == 46080
    assert vllm_sizing.cpu_kv_cache_bytes(model.config, "float32", 300, 10) == TOKEN * 384 * 10  # 300 tokens take 3 blocks of 128
    assert vllm_sizing.cpu_kv_cache_bytes(model.config, "bfloat16", 256, 1) == TOKEN // 2 * 256


def test_null_max_model_len_is_what_the_command_needs_within_the_models_context(model):
    size = sized(engine_cfg(), model, "float32", Demand(context=409, requests=16), free_bytes=20 * GIB)
    assert (size.max_model_len, size.max_num_seqs, size.kv_cache_bytes) == (409, 16, TOKEN * 512 * 16)
    longer = sized(engine_cfg(), model, "float32", Demand(context=9000, requests=2000), free_bytes=None)
    assert (longer.max_model_len, longer.max_num_seqs) == (8192, 1024)  # the model's context; engine.batch_size
    unknown = sized(engine_cfg("engine.batch_size=8"), model, "float32", Demand(), free_bytes=None)
    assert (unknown.max_model_len, unknown.max_num_seqs) == (8192, 8)
    given = sized(engine_cfg("engine.vllm.max_model_len=1000"), model, "float32", Demand(context=409, requests=16), free_bytes=None)
    assert given.max_model_len == 1000


def test_a_max_model_len_beyond_the_models_context_is_refused_in_one_line(model):
    with pytest.raises(ConfigError, match=r"'engine.vllm.max_model_len': 9000 is longer than this model's context of 8192 tokens .*use at most 8192"):
        sized(engine_cfg("engine.vllm.max_model_len=9000"), model, "float32", Demand(context=409), free_bytes=None)


def test_a_kv_cache_beyond_the_free_memory_is_refused_naming_the_batch_size_that_fits(model):
    cfg = engine_cfg("engine.vllm.max_model_len=8192")  # the old default: 1024 x 8192 tokens = 360 GiB
    with pytest.raises(ConfigError) as refused:
        sized(cfg, model, "float32", Demand(context=409, requests=4096), free_bytes=int(21.44 * GIB))
    message = str(refused.value)
    assert "\n" not in message and message.startswith("config error at 'engine.batch_size': vLLM's KV cache for 1024 sequences")
    assert "of 8192 tokens (engine.vllm.max_model_len=8192)" in message and "need 360.1 GiB" in message and "21.4 GiB of memory free" in message
    fits = int(message.split("engine.batch_size=")[2].split(" ")[0])
    weights = sum(p.numel() for p in model.parameters()) * 4
    assert fits == int((0.9 * int(21.44 * GIB) - weights) // (TOKEN * 8192)) == 54
    sized(engine_cfg("engine.vllm.max_model_len=8192", f"engine.batch_size={fits}"), model, "float32", Demand(), free_bytes=int(21.44 * GIB))
    with pytest.raises(ConfigError):
        sized(engine_cfg("engine.vllm.max_model_len=8192", f"engine.batch_size={fits + 1}"), model, "float32", Demand(), free_bytes=int(21.44 * GIB))


def test_the_refusal_says_when_the_cap_of_the_commands_requests_applied_and_what_else_fits(model):
    with pytest.raises(ConfigError, match=r"for 64 sequences \(engine.batch_size=1024, capped at the 64 requests this command sends at once\) "
                       r"of 4000 tokens \(engine.vllm.max_model_len=null: 4000, the longest prompt \+ engine.max_new_tokens\)"):
        sized(engine_cfg(), model, "float32", Demand(context=4000, requests=64), free_bytes=4 * GIB)
    with pytest.raises(ConfigError, match=r"engine.batch_size=1 with engine.vllm.max_model_len=\d+ fits"):
        sized(engine_cfg(), model, "float32", Demand(context=8192, requests=64), free_bytes=GIB // 4)
    with pytest.raises(ConfigError, match="free memory, or use engine=hf"):
        sized(engine_cfg(), model, "float32", Demand(context=8192, requests=64), free_bytes=GIB // 64)


def test_on_cuda_the_memory_share_sizes_the_cache(model, monkeypatch):
    monkeypatch.setattr(vllm_platform, "on_cuda", lambda: True)
    assert sized(engine_cfg(), model, "bfloat16", Demand(context=409, requests=16), vllm_platform.free_memory()).kv_cache_bytes is None


@pytest.mark.parametrize("overrides, world, requests", [
    ([], SINGLE, 16),                                                                # a step's rollout: 4 prompts x 4 samples
    (["ratio=25", "refresh=5"], SINGLE, 20),                                         # a window's seeds: 5 steps x 4 prompts x 1 seed
    (["ratio=25", "refresh=0"], SINGLE, 40),                                         # refresh=0: one window of the run's 10 steps
    (["trainer.eval_every=5", "trainer.eval_samples=8"], SINGLE, 50 * 8),            # held-out pass@1: 50 problems (all there are) x 8
    (["trainer.eval_every=5", "trainer.eval_problems=30", "trainer.eval_samples_problems=2"], SINGLE, 30),
    (["trainer.batch_size=6"], World(rank=1, size=4), 2 * 4),                        # rank 0's block of 6 prompts over 4 ranks: 2
    (["ratio=25", "seeds.selector=max_entropy", "seeds.pool_size=2"], SINGLE, 16 * 4),  # a snapshot's probes
])
def test_a_runs_requests_are_its_largest_generate_call(overrides, world, requests):
    cfg = compose_config([
        "model=micro", "task=arithmetic", "task.train_size=200", "task.heldout_size=50", "trainer.batch_size=4", "trainer.n=4", "trainer.steps=10",
        "trainer.eval_every=0", *overrides,
    ]).cfg
    task = build_task(cfg.task)
    formatter = PromptFormatter(qwen_like_tokenizer(), True)
    demand = train_demand(cfg, task, formatter, world)
    longest = max(len(formatter.prompt_ids(p.question)) for split in ("train", "heldout") for p in task.problems(split))
    assert (demand.context, demand.requests) == (longest + cfg.engine.max_new_tokens + int(cfg.ratio > 0), requests)


@pytest.mark.parametrize("overrides, adapters", [
    ([], 1),                                                                 # the policy's adapter alone
    (["ratio=25", "refresh=2"], 1),                                          # seeds from the live weights: no pool
    (["ratio=25", "refresh=2", "seeds.selector=uniform", "seeds.pool_size=3"], 1 + 3),  # the policy's and the pool's
])
def test_a_runs_adapters_are_the_policys_and_its_behaviour_pools(overrides, adapters):
    cfg = compose_config(["model=micro", "task=arithmetic", "task.train_size=200", "task.heldout_size=50", "trainer.steps=10", *overrides]).cfg
    assert train_demand(cfg, build_task(cfg.task), PromptFormatter(qwen_like_tokenizer(), True), SINGLE).adapters == adapters
