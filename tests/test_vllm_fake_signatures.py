"""The stand-in vLLM (tests/fakes/vllm.py) names only what real vLLM has, with real vLLM's signatures.

The stand-in is kept for what vLLM's CPU build cannot run (sleep mode, tensor-parallel workers over
CUDA IPC); these checks keep it from drifting into a vLLM of our own reading. Skipped where vLLM
is not installed.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from fakes import vllm as fake

pytestmark = pytest.mark.vllm


def parameters(function) -> set[str]:
    return {name for name, p in inspect.signature(function).parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)} - {"self"}


@pytest.fixture(scope="module")
def real():
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return LLM, SamplingParams, EngineArgs, GPUModelRunner


def test_llm_keywords_exist_in_vllm(real):
    LLM, _, EngineArgs, _ = real
    known = parameters(LLM.__init__) | {field.name for field in dataclasses.fields(EngineArgs)}
    assert fake.LLM_KWARGS <= known, sorted(fake.LLM_KWARGS - known)


def test_sampling_params_fields_exist_in_vllm(real):
    _, SamplingParams, _, _ = real
    assert set(fake.SamplingParams.FIELDS) <= set(SamplingParams.__struct_fields__)


@pytest.mark.parametrize("method", ["generate", "sleep", "wake_up", "reset_prefix_cache", "collective_rpc"])
def test_llm_methods_take_what_vllms_take(real, method):
    LLM = real[0]
    assert parameters(getattr(fake.LLM, method)) <= parameters(getattr(LLM, method))


def test_the_workers_reload_is_vllms(real):
    runner = real[3]  # the worker's reload_weights passes its arguments on to its model runner's
    assert parameters(fake.FakeWorker.reload_weights) == parameters(runner.reload_weights)


def test_outputs_carry_the_fields_tsctl_reads(real):
    from vllm.logprobs import Logprob
    from vllm.outputs import CompletionOutput, RequestOutput

    for ours, theirs in ((fake.CompletionOutput, CompletionOutput), (fake.RequestOutput, RequestOutput), (fake.Logprob, Logprob)):
        fields = {f.name for f in dataclasses.fields(theirs)} if dataclasses.is_dataclass(theirs) else parameters(theirs.__init__)
        assert {f.name for f in dataclasses.fields(ours)} <= fields, theirs.__name__
