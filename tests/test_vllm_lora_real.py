"""The vllm engine serving a LoRA policy (``model.lora``) against real vLLM (its CPU build in CI) and real peft.

One engine is built for the module over a tiny random Qwen2 (head_dim 32) whose policy carries a rank-8 adapter on
every projection: its samples' log-probs are the trainer's forward with the adapter, also after an update changed the
adapter and the sync moved it; behaviour snapshots are sampled with their own adapter from the same engine; an
adapter vLLM cannot serve is refused in one line. Skipped where vLLM cannot run.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fakes.qwen import save_qwen_folder
from test_vllm_engine_real import GAP, max_gap, requests_for
from tsctl.config.errors import ConfigError
from tsctl.config.schema import LoraConfig
from tsctl.engines.base import AdapterEngine, Demand, Request, SamplingParams
from tsctl.engines.factory import build_engine
from tsctl.engines.vllm_lora import VLLM_RANKS
from tsctl.io.adapters import save_weights
from tsctl.models.lora import adapter_off, add_adapter, swapped_adapter, trainable_parameters
from tsctl.models.prompts import PromptFormatter
from tsctl.runconfig import compose_config

pytestmark = pytest.mark.vllm

SETTINGS = LoraConfig(rank=8, alpha=16.0)
POOL = 3
"""Snapshots the engine is sized for besides the policy."""
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=16)
APART = 0.05
"""Smallest largest log-prob gap between two different adapters' distributions on these samples."""


def randomise_adapter(model: torch.nn.Module, seed: int) -> None:
    """Give every ``lora_B`` random values (zero in a new adapter), as training would."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return save_qwen_folder(tmp_path_factory.mktemp("qwen"), head_dim=32)


@pytest.fixture(scope="module")
def policy(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    add_adapter(model, SETTINGS, str(folder), seed=0)
    randomise_adapter(model, 1)
    return model, PromptFormatter(AutoTokenizer.from_pretrained(folder), True, model.generation_config)


@pytest.fixture(scope="module")
def engine(folder, policy):
    model, formatter = policy
    cfg = compose_config(["engine=vllm", "engine.vllm.enforce_eager=true", "engine.batch_size=64", "model.lora.rank=8", "seed=3"]).cfg
    return build_engine(cfg.engine, model, formatter.end_ids, formatter.pad_id, str(folder), seed=cfg.seed, demand=lambda: Demand(adapters=1 + POOL))


def test_vllm_is_started_once_on_the_base_with_room_for_the_pool_and_the_policy(engine, folder):
    assert isinstance(engine, AdapterEngine) and engine.serves_adapters
    assert VLLM_RANKS == typing.get_args(__import__("vllm.config.lora", fromlist=["MaxLoRARanks"]).MaxLoRARanks)
    config = engine.llm.llm_engine.vllm_config
    assert Path(config.model_config.model) == folder
    assert (config.lora_config.max_lora_rank, config.lora_config.max_loras, config.lora_config.max_cpu_loras) == (8, 1 + POOL, 1 + POOL)


def test_the_policys_samples_have_the_trainers_log_probs_with_its_adapter(engine, policy):
    model, formatter = policy
    requests = requests_for(formatter)  # every third continues a prefix
    completions = engine.generate(requests, PARAMS)
    assert max_gap(model, requests, completions, PARAMS) <= GAP
    with adapter_off(model):
        assert max_gap(model, requests, completions, PARAMS) > APART  # the adapter was applied, not the base alone


def copy_into(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in weights:
                p.copy_(weights[name])


def test_after_an_update_the_sync_moves_the_adapter_alone_and_vllm_serves_the_new_one(engine, policy):
    model, formatter = policy
    cached = Request([(7 * i) % 250 for i in range(180)])  # many KV blocks: cached after its first request
    requests = [*requests_for(formatter, 6), cached]
    engine.generate([cached], PARAMS)
    old = {name: p.detach().clone() for name, p in model.named_parameters()}
    before = engine.adapters.policy
    optimizer = torch.optim.SGD(trainable_parameters(model), lr=5.0)
    ids = torch.tensor([list(requests[1].prompt_ids) + [65, 66, 67]])
    model(ids).logits[0, -4:].log_softmax(-1)[:, 70].sum().backward()  # raise one token's probability: an update
    optimizer.step()
    optimizer.zero_grad()
    try:
        changed = [name for name, p in model.named_parameters() if not torch.equal(p, old[name])]
        assert changed and all(".lora_" in name for name in changed)
        engine.load_weights(model.state_dict())
        after = engine.adapters.policy
        assert after.lora_int_id != before.lora_int_id and after.lora_name != before.lora_name
        assert engine.llm.llm_engine.list_loras() == {after.lora_int_id}  # the old version unloaded
        assert not Path(before.lora_path).exists() and Path(after.lora_path).is_dir()
        fresh = engine.generate(requests, PARAMS)
        assert max_gap(model, requests, fresh, PARAMS) <= GAP
        copy_into(model, old)
        assert max_gap(model, requests, fresh, PARAMS) > APART  # far from the adapter before the update
    finally:
        copy_into(model, old)
        engine.load_weights(model.state_dict())


def test_each_snapshot_is_sampled_with_its_own_adapter_from_the_same_engine(engine, policy, tmp_path):
    model, formatter = policy
    own = {name: p.detach().clone() for name, p in model.named_parameters() if ".lora_" in name}
    snapshots = []
    for seed in (11, 12, 13):
        randomise_adapter(model, seed)
        save_weights(model, tmp_path / f"step-{seed}")
        snapshots.append(tmp_path / f"step-{seed}")
    copy_into(model, own)
    requests = requests_for(formatter, 6)
    for index, snapshot in enumerate(snapshots):
        completions = engine.with_adapter(snapshot).generate(requests, PARAMS)
        with swapped_adapter(model, snapshot):
            assert max_gap(model, requests, completions, PARAMS) <= GAP
        with swapped_adapter(model, snapshots[index - 1]):
            assert max_gap(model, requests, completions, PARAMS) > APART
    assert engine.with_adapter(snapshots[0]).request is engine.with_adapter(snapshots[0]).request  # loaded once
    assert max_gap(model, requests, engine.generate(requests, PARAMS), PARAMS) <= GAP  # the policy's adapter unchanged


def test_an_adapter_on_a_module_vllm_does_not_adapt_is_refused_in_one_line_quoting_vllm(engine, folder, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    add_adapter(model, LoraConfig(rank=8, target_modules=["q_proj", "lm_head"]), str(folder), seed=0)
    save_weights(model, tmp_path / "head")
    with pytest.raises(ConfigError) as err:
        engine.with_adapter(tmp_path / "head")
    message = str(err.value)
    assert err.value.key == "model.lora.target_modules" and "\n" not in message
    assert "engine=vllm cannot serve this LoRA adapter; vLLM: " in message and "lm_head" in message and "q_proj" in message
