"""The vllm engine against fake vLLM objects (vLLM itself needs a GPU and is not installed here)."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from tsctl.config.schema import EngineConfig
from tsctl.engines.base import Completion, Request, SamplingParams
from tsctl.engines.factory import build_engine
from tsctl.engines.vllm import (
    VLLMEngine,
    WeightLoaderExtension,
    build_prompts,
    build_sampling_params,
    to_completion,
)


@dataclass
class FakeLogprob:
    logprob: float
    rank: int = 1


@dataclass
class FakeSample:
    token_ids: tuple[int, ...]
    logprobs: list[dict[int, FakeLogprob]] | None
    finish_reason: str


@dataclass
class FakeOutput:
    outputs: list[FakeSample]


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


@dataclass
class FakeLLM:
    """Echoes each prompt's last token twice, then EOS (2) when the prompt is long, else stops at the length."""

    kwargs: dict[str, Any]
    rpc_calls: list[tuple[str, tuple]] = field(default_factory=list)

    def generate(self, prompts, sampling_params, use_tqdm=True):
        assert len(prompts) == len(sampling_params) and not use_tqdm
        outputs = []
        for prompt in prompts:
            last = prompt["prompt_token_ids"][-1]
            tokens = (last, last, 2) if len(prompt["prompt_token_ids"]) > 3 else (last, last)
            steps = [{t: FakeLogprob(-0.5 * (i + 1)), 99: FakeLogprob(-9.0)} for i, t in enumerate(tokens)]
            outputs.append(FakeOutput([FakeSample(tokens, steps, "stop" if tokens[-1] == 2 else "length")]))
        return outputs

    def collective_rpc(self, method, args=()):
        self.rpc_calls.append((method, args))


@pytest.fixture
def fake_vllm(monkeypatch) -> types.ModuleType:
    module = types.ModuleType("vllm")
    module.SamplingParams = FakeSamplingParams
    module.LLM = lambda **kwargs: FakeLLM(kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    return module


def test_missing_vllm_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"pip install 'tsctl\[gpu\]'"):
        VLLMEngine("some/folder", eos_id=2)


def test_prompts_are_prompt_then_prefix_ids():
    requests = [Request([1, 2], (3, 4)), Request((5,))]
    assert build_prompts(requests) == [{"prompt_token_ids": [1, 2, 3, 4]}, {"prompt_token_ids": [5]}]


def test_sampling_params_carry_ours_with_one_seed_per_request():
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=12, seed=3)
    requests = [Request((1,)), Request((1,), (4, 5), max_new_tokens=5), Request((1,), max_new_tokens=40), Request((3,))]
    built = build_sampling_params(FakeSamplingParams, params, eos_id=2, requests=requests)
    first = built[0].__dict__
    assert first["n"] == 1 and first["temperature"] == 0.7 and first["top_p"] == 0.9
    assert first["max_tokens"] == 12 and first["logprobs"] == 0
    assert first["ignore_eos"] and first["stop_token_ids"] == [2] and not first["detokenize"]
    assert [p.max_tokens for p in built] == [12, 5, 12, 12]  # a request's own limit, capped by the params'
    seeds = [p.seed for p in built]
    assert len(set(seeds)) == 4
    assert seeds == [p.seed for p in build_sampling_params(FakeSamplingParams, params, 2, requests)]
    assert seeds != [p.seed for p in build_sampling_params(FakeSamplingParams, SamplingParams(seed=4), 2, requests)]


def test_outputs_become_completions():
    steps = [{7: FakeLogprob(-0.25)}, {2: FakeLogprob(-1.5), 5: FakeLogprob(-0.1)}]
    stopped = to_completion(FakeOutput([FakeSample((7, 2), steps, "stop")]))
    assert stopped == Completion(token_ids=[7, 2], logprobs=[-0.25, -1.5], finished=True)
    cut = to_completion(FakeOutput([FakeSample((7,), steps[:1], "length")]))
    assert cut == Completion(token_ids=[7], logprobs=[-0.25], finished=False)
    with pytest.raises(ValueError, match="logprobs=0"):
        to_completion(FakeOutput([FakeSample((7,), None, "length")]))


def test_engine_wires_vllm_calls(fake_vllm):
    engine = VLLMEngine("some/folder", eos_id=2, dtype="bfloat16", gpu_memory_utilization=0.3)
    assert engine.llm.kwargs["model"] == "some/folder"
    assert engine.llm.kwargs["logprobs_mode"] == "processed_logprobs"
    assert engine.llm.kwargs["worker_extension_cls"] == "tsctl.engines.vllm.WeightLoaderExtension"
    completions = engine.generate([Request([1, 2, 3], (4,)), Request([8])], SamplingParams())
    assert completions == [
        Completion([4, 4, 2], [-0.5, -1.0, -1.5], True),
        Completion([8, 8], [-0.5, -1.0], False),
    ]
    weights = {"lm_head.weight": torch.ones(2, 2)}
    engine.load_weights(weights)
    assert engine.llm.rpc_calls == [("tsctl_load_weights", (list(weights.items()),))]


def test_worker_extension_loads_into_the_worker_model():
    loaded = []
    worker = WeightLoaderExtension()
    model = types.SimpleNamespace(load_weights=lambda weights: loaded.extend(weights))
    worker.model_runner = types.SimpleNamespace(model=model)
    worker.tsctl_load_weights([("w", torch.zeros(1))])
    assert [name for name, _ in loaded] == ["w"]


def test_factory_builds_vllm_from_a_folder(fake_vllm):
    model = types.SimpleNamespace(dtype=torch.bfloat16)
    cfg = EngineConfig(name="vllm", gpu_memory_utilization=0.4, tensor_parallel_size=1)
    engine = build_engine(cfg, model, eos_id=2, pad_id=0, model_path="ckpt")
    assert isinstance(engine, VLLMEngine)
    assert engine.llm.kwargs["dtype"] == "bfloat16" and engine.llm.kwargs["gpu_memory_utilization"] == 0.4
    with pytest.raises(ValueError, match="model_path"):
        build_engine(cfg, model, eos_id=2, pad_id=0)
