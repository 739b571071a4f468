"""A stand-in ``vllm`` module for what vLLM's CPU build cannot run: sleep mode and tensor-parallel workers on CUDA.

Everything else runs against real vLLM (tests/test_vllm_*_real.py); ``test_vllm_fake_signatures.py``
checks this module's names and signatures against the real one where vLLM is installed. Tests
install it as ``sys.modules["vllm"]`` on a machine it presents as a CUDA one (:func:`install`). It is
stricter than vLLM where vLLM would fail late or silently:

- ``LLM(...)`` accepts only keyword arguments vLLM has, checks their values (dtype,
  ``logprobs_mode``, memory share, ``max_model_len`` within the model's context), reads the model
  folder (tensor names and shapes of its safetensors, tied embeddings, the tokenizer's EOS and
  the generation config's EOS ids) and builds ``tensor_parallel_size`` workers with the
  ``worker_extension_cls`` mixed in, as vLLM does; sleep mode is refused on a CPU platform, as
  vLLM's CPU build refuses it;
- ``SamplingParams`` rejects unknown fields, wrong types and out-of-range values;
- ``generate`` refuses to run asleep (vLLM's paused scheduler would hang), checks every
  ``TokensPrompt``, and stops each sample as vLLM's ``check_stop`` does: at the tokenizer's EOS
  and the generation config's EOS ids unless ``ignore_eos``, at ``stop_token_ids``, at
  ``max_tokens`` or at ``max_model_len``. The tokens it "samples" come from a script, and so do
  their log-probs (-0.25, -0.5, ...: no model's; real log-probs are checked against real vLLM);
- ``sleep``/``wake_up`` track which memory (weights, KV cache) is discarded: level 2 discards the
  weights, and a worker's ``model.load_weights`` refuses to write into discarded weights;
- a worker's ``reload_weights`` checks every name against the folder's tensor names (``lm_head`` is
  skipped when tied, as vLLM does), every shape, and that every tensor has the engine's dtype;
- ``collective_rpc`` with more than one worker pickles its arguments, as vLLM's message queue
  does, and refuses any tensor among them: those would be copied through the host;
- every call is appended to ``llm.events``.
"""

from __future__ import annotations

import importlib
import json
import pickle
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from safetensors import safe_open
from transformers import AutoTokenizer, GenerationConfig

Script = Callable[[list[int]], Iterator[int]]
"""What the fake model "samples" after a prompt: an endless stream of token ids."""

LLM_KWARGS = {
    "model", "tokenizer", "dtype", "seed", "gpu_memory_utilization", "tensor_parallel_size", "max_model_len",
    "max_num_seqs", "enable_sleep_mode", "enable_prefix_caching", "logprobs_mode", "worker_extension_cls",
    "enforce_eager", "trust_remote_code", "distributed_executor_backend", "data_parallel_size", "kv_cache_memory_bytes",
    "use_tqdm_on_load",
}
"""Keyword arguments of ``vllm.LLM`` (named or ``EngineArgs`` fields) the fake understands."""

DTYPES = {"auto": None, "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
LOGPROBS_MODES = ("raw_logits", "raw_logprobs", "processed_logits", "processed_logprobs")
WAKE_TAGS = ("weights", "kv_cache", "scheduling")


def end_after(count: Callable[[list[int]], int], end: int | None) -> Script:
    """A script that writes ``count(prompt)`` byte tokens (65, 66, ...), then ``end`` (unless None), then more bytes."""

    def script(prompt: list[int]) -> Iterator[int]:
        n = count(prompt)
        for i in range(n):
            yield 65 + i % 26
        if end is not None:
            yield end
        i = 0
        while True:
            yield 97 + i % 26
            i += 1

    return script


class SamplingParams:
    """vLLM ``SamplingParams`` fields that tsctl may set, with their types and ranges checked."""

    FIELDS: dict[str, tuple[tuple[type, ...], Any]] = {
        "n": ((int,), 1), "temperature": ((float,), 1.0), "top_p": ((float,), 1.0), "top_k": ((int,), 0),
        "seed": ((int, type(None)), None), "stop_token_ids": ((list, type(None)), None), "ignore_eos": ((bool,), False),
        "max_tokens": ((int, type(None)), 16), "min_tokens": ((int,), 0), "logprobs": ((int, type(None)), None),
        "detokenize": ((bool,), True), "skip_special_tokens": ((bool,), True),
    }

    def __init__(self, **kwargs: Any) -> None:
        for name, value in kwargs.items():
            if name not in self.FIELDS:
                raise TypeError(f"SamplingParams got an unexpected keyword argument {name!r}")
            types_ = self.FIELDS[name][0]
            if isinstance(value, bool) and bool not in types_ or not isinstance(value, types_):
                raise TypeError(f"SamplingParams.{name}={value!r}: expected {' | '.join(t.__name__ for t in types_)}")
        for name, (_, default) in self.FIELDS.items():
            setattr(self, name, kwargs.get(name, default))
        self.given = frozenset(kwargs)
        if self.stop_token_ids is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in self.stop_token_ids):
            raise TypeError(f"SamplingParams.stop_token_ids must be a list of int, got {self.stop_token_ids!r}")
        if self.n < 1 or not 0.0 <= self.temperature <= 2.0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams out of range: n={self.n}, temperature={self.temperature}, top_p={self.top_p}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.logprobs is not None and self.logprobs < -1:
            raise ValueError(f"logprobs must be >= -1, got {self.logprobs}")


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


@dataclass
class Folder:
    """What vLLM reads from a model folder."""

    tensors: dict[str, tuple[int, ...]]
    tied: bool
    max_positions: int
    vocab_size: int
    eos_id: int | None
    generation_eos: set[int]

    @classmethod
    def read(cls, path: str) -> "Folder":
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise OSError(f"{path} is not a model folder (no config.json)")
        config = json.loads((folder / "config.json").read_text())
        tensors: dict[str, tuple[int, ...]] = {}
        for file in sorted(folder.glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as f:
                tensors.update({name: tuple(f.get_slice(name).get_shape()) for name in f.keys()})
        eos = GenerationConfig.from_pretrained(path).eos_token_id if (folder / "generation_config.json").is_file() else None
        generation_eos = set(eos) if isinstance(eos, list) else ({eos} if eos is not None else set())
        return cls(
            tensors=tensors, tied=bool(config.get("tie_word_embeddings", False)), max_positions=int(config["max_position_embeddings"]),
            vocab_size=int(config["vocab_size"]), eos_id=AutoTokenizer.from_pretrained(path).eos_token_id, generation_eos=generation_eos,
        )


class FakeModel(torch.nn.Module):
    """A worker's model: ``load_weights`` takes (folder name, tensor) pairs, as vLLM's models do."""

    def __init__(self, llm: "LLM", rank: int) -> None:
        super().__init__()
        self.llm, self.rank = llm, rank
        self.loaded: dict[str, torch.Tensor] = {}

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        llm = self.llm
        if "weights" in llm.discarded:
            raise RuntimeError("load_weights into discarded weights: wake_up(tags=['weights']) first")
        names = set()
        for name, tensor in weights:
            if llm.folder.tied and name == "lm_head.weight":
                continue  # vLLM ties lm_head to the embedding and skips it
            if name not in llm.folder.tensors:
                raise KeyError(f"weight {name!r} is not in the model folder (known: {sorted(llm.folder.tensors)[:4]}...)")
            if tuple(tensor.shape) != llm.folder.tensors[name]:
                raise ValueError(f"weight {name}: shape {tuple(tensor.shape)} != {llm.folder.tensors[name]}")
            if tensor.dtype != llm.dtype:
                raise TypeError(f"weight {name}: dtype {tensor.dtype}, but the engine runs {llm.dtype}")
            self.loaded[name] = tensor.detach().clone()
            names.add(name)
        llm.stale -= names
        llm.events.append(("load_weights", self.rank, len(names)))
        return names


class FakeWorker:
    """The part of vLLM's GPU worker the extension sees: ``self.model_runner.model`` and ``reload_weights``."""

    def __init__(self, llm: "LLM", rank: int) -> None:
        self.rank = rank
        self.model_runner = types.SimpleNamespace(model=FakeModel(llm, rank))

    def reload_weights(
        self, weights_iterator: Iterable[tuple[str, torch.Tensor]] | None = None, weights_path: str | None = None, is_checkpoint_format: bool = True,
    ) -> None:
        if weights_iterator is None or not is_checkpoint_format:
            raise AssertionError("tsctl reloads checkpoint-format tensors it hands over")
        self.model_runner.model.load_weights(weights_iterator)


def _tensors_in(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict):
        return any(_tensors_in(v) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(_tensors_in(v) for v in value)
    return hasattr(value, "__dict__") and not isinstance(value, type) and _tensors_in(vars(value))


class LLM:
    """``vllm.LLM`` as far as tsctl uses it (see the module docstring)."""

    script: Script = staticmethod(end_after(lambda prompt: 0, end=None))  # bytes only; install() sets another
    instances: list["LLM"] = []
    platform = "cuda"

    def __init__(self, model: str, **kwargs: Any) -> None:
        unknown = set(kwargs) - LLM_KWARGS
        if unknown:
            raise TypeError(f"LLM got unexpected keyword arguments {sorted(unknown)}")
        dtype = kwargs.get("dtype", "auto")
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}")
        if kwargs.get("logprobs_mode", "raw_logprobs") not in LOGPROBS_MODES:
            raise ValueError(f"unknown logprobs_mode {kwargs['logprobs_mode']!r}")
        memory = kwargs.get("gpu_memory_utilization", 0.92)
        if memory is not None and not 0.0 < memory <= 1.0:
            raise ValueError(f"gpu_memory_utilization={memory} must be in (0, 1]")
        if not isinstance(kwargs.get("seed", 0), int):
            raise TypeError("LLM.seed must be an int")
        if kwargs.get("enable_sleep_mode") and type(self).platform != "cuda":
            raise ValueError("Sleep mode is not supported on current platform.")
        self.kwargs = {"model": model, **kwargs}
        self.folder = Folder.read(model)
        self.dtype = DTYPES[dtype] or torch.bfloat16
        self.max_model_len = kwargs.get("max_model_len") or self.folder.max_positions
        if self.max_model_len > self.folder.max_positions:
            raise ValueError(f"max_model_len={self.max_model_len} exceeds the model's {self.folder.max_positions} positions")
        self.sleep_mode = bool(kwargs.get("enable_sleep_mode", False))
        self.discarded: set[str] = set()
        self.stale: set[str] = set()
        """Weights discarded by sleep level 2 and not loaded since: sampling from them is garbage."""
        self.events: list[tuple] = []
        extension = kwargs.get("worker_extension_cls", "")
        bases: tuple[type, ...] = (FakeWorker,)
        if extension:
            module, _, name = extension.rpartition(".")
            bases += (getattr(importlib.import_module(module), name),)
        worker_cls = type("Worker", bases, {})
        self.workers = [worker_cls(self, rank) for rank in range(kwargs.get("tensor_parallel_size", 1))]
        self.llm_engine = types.SimpleNamespace(engine_core=types.SimpleNamespace(shutdown=lambda: self.events.append(("shutdown",))))
        type(self).instances.append(self)

    def generate(self, prompts: Any, sampling_params: Any = None, *, use_tqdm: bool = True, lora_request: Any = None, **kwargs: Any) -> list[RequestOutput]:
        if lora_request is not None:
            raise NotImplementedError("the stand-in serves no LoRA adapters; real vLLM's CPU build does (tests/test_vllm_lora_real.py)")
        if self.discarded:
            raise RuntimeError(f"generate while asleep ({sorted(self.discarded)} discarded): vLLM would wait forever")
        if self.stale:
            raise RuntimeError(f"generate with weights discarded by sleep(level=2) and never reloaded: {sorted(self.stale)[:3]}...")
        if kwargs:
            raise TypeError(f"generate got unexpected keyword arguments {sorted(kwargs)}")
        prompts = prompts if isinstance(prompts, list) else [prompts]
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        outputs = []
        for index, (prompt, sp) in enumerate(zip(prompts, params)):
            if not isinstance(sp, SamplingParams):
                raise TypeError(f"sampling_params[{index}] is {type(sp).__name__}, not vllm.SamplingParams")
            outputs.append(self._sample(index, self._prompt_ids(prompt), sp))
        self.events.append(("generate", len(prompts)))
        return outputs

    def _prompt_ids(self, prompt: Any) -> list[int]:
        if not isinstance(prompt, dict) or set(prompt) != {"prompt_token_ids"}:
            raise TypeError(f"expected a TokensPrompt {{'prompt_token_ids': [...]}}, got {prompt!r}")
        ids = prompt["prompt_token_ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and 0 <= t < self.folder.vocab_size for t in ids):
            raise ValueError(f"prompt_token_ids must be a non-empty list of token ids < {self.folder.vocab_size}")
        if len(ids) >= self.max_model_len:
            raise ValueError(f"the decoder prompt (length {len(ids)}) is longer than the maximum model length of {self.max_model_len}")
        return ids

    def _sample(self, index: int, prompt: list[int], sp: SamplingParams) -> RequestOutput:
        stops = set(sp.stop_token_ids or ())
        eos = None if sp.ignore_eos else self.folder.eos_id
        if not sp.ignore_eos:
            stops |= self.folder.generation_eos
        tokens: list[int] = []
        reason = "length"
        for token in self.script(prompt):
            tokens.append(token)
            if token == eos or token in stops:
                reason = "stop"
                break
            if len(prompt) + len(tokens) >= self.max_model_len or len(tokens) >= (sp.max_tokens or self.max_model_len):
                break
        logprobs = None if sp.logprobs is None else [{t: Logprob(-0.25 * (i + 1), rank=1)} for i, t in enumerate(tokens)]
        sample = CompletionOutput(0, "" if not sp.detokenize else "<text>", tokens, None, logprobs, reason, tokens[-1] if reason == "stop" else None)
        return RequestOutput(str(index), prompt, [sample])

    def sleep(self, level: int = 1, mode: str = "abort") -> None:
        if not self.sleep_mode:
            raise RuntimeError("sleep mode is not enabled: LLM(enable_sleep_mode=True)")
        if level not in (0, 1, 2):
            raise ValueError(f"unknown sleep level {level}")
        self.events.append(("sleep", level))
        if level >= 1:
            self.discarded |= {"kv_cache", "scheduling"} | ({"weights"} if level == 2 else set())
            if level == 2:
                self.stale = {n for n in self.folder.tensors if not (self.folder.tied and n == "lm_head.weight")}
                for worker in self.workers:
                    worker.model_runner.model.loaded.clear()
        else:
            self.discarded.add("scheduling")

    def wake_up(self, tags: list[str] | None = None) -> bool:
        if tags is not None and (not isinstance(tags, list) or set(tags) - set(WAKE_TAGS)):
            raise ValueError(f"wake_up tags must be a list drawn from {WAKE_TAGS}, got {tags!r}")
        self.events.append(("wake_up", None if tags is None else tuple(tags)))
        self.discarded -= set(WAKE_TAGS if tags is None else tags)
        if not self.discarded - {"scheduling"}:
            self.discarded.discard("scheduling")  # fully awake: the scheduler resumes
        return not self.discarded

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        self.events.append(("reset_prefix_cache",))
        return True

    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple = (), kwargs: dict | None = None) -> list[Any]:
        if not isinstance(method, str):
            raise TypeError("tsctl calls worker methods by name")
        kwargs = kwargs or {}
        if len(self.workers) > 1:
            if _tensors_in((args, kwargs)):
                raise AssertionError(f"collective_rpc({method!r}) with tensor arguments: they would be pickled through the host")
            payload = pickle.dumps((args, kwargs))
            self.events.append(("rpc", method, len(payload)))
            args, kwargs = pickle.loads(payload)
        else:
            self.events.append(("rpc", method, None))
        return [getattr(worker, method)(*args, **kwargs) for worker in self.workers]


def install(monkeypatch: Any, script: Script | None = None, platform: str = "cuda") -> types.ModuleType:
    """Make ``import vllm`` return this fake for one test, on a machine tsctl takes for ``platform`` (``cuda``
    or ``cpu``); ``script`` decides what gets "sampled"."""
    from tsctl.engines import vllm_platform

    monkeypatch.setattr(vllm_platform, "on_cuda", lambda: platform == "cuda")
    module = types.ModuleType("vllm")
    llm_cls = type("LLM", (LLM,), {"instances": [], "platform": platform})
    if script is not None:
        llm_cls.script = staticmethod(script)
    module.LLM = llm_cls
    module.SamplingParams = SamplingParams
    module.TokensPrompt = dict
    module.RequestOutput = RequestOutput
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    return module
