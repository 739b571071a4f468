"""The ``vllm`` rollout engine: vLLM's offline ``LLM`` behind the :class:`~tsctl.engines.base.Engine` interface.

Semantics match the ``hf`` engine:

- the prompt fed is prompt ids + prefix ids, as a ``TokensPrompt`` (no text is re-encoded);
- each request is one sample (``n=1``) with its own seed drawn from ``SamplingParams.seed``;
- a sample stops only at ``eos_id`` (``ignore_eos`` plus ``stop_token_ids=[eos_id]``, so the
  tokenizer's other end tokens do not stop it) or at ``max_new_tokens``;
- log-probs are those of the distribution sampled from (``logprobs_mode="processed_logprobs"``:
  after temperature and top-p), one per generated token (``logprobs=0``);
- ``load_weights`` runs ``model.load_weights`` on every vLLM worker through ``collective_rpc``.

vLLM is imported only when an engine is built, so tsctl works without it. The conversions are plain
functions so they can be tested without vLLM.
"""

from __future__ import annotations

import os
import random
from typing import Any, Sequence

import torch

from tsctl.engines.base import Completion, Request, SamplingParams

INSTALL_HINT = "the vllm engine needs vLLM (a CUDA machine): pip install 'tsctl[gpu]'"


def import_vllm() -> Any:
    """Import vLLM, or fail with the install command."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return vllm


def request_seeds(seed: int, count: int) -> list[int]:
    """One seed per request, all drawn from ``seed`` (identical requests must not share a seed)."""
    rng = random.Random(seed)
    return [rng.getrandbits(31) for _ in range(count)]


def build_prompts(requests: Sequence[Request]) -> list[dict[str, list[int]]]:
    """vLLM ``TokensPrompt`` dicts: prompt ids followed by prefix ids."""
    return [{"prompt_token_ids": [*r.prompt_ids, *r.prefix_ids]} for r in requests]


def build_sampling_params(sampling_params_cls: Any, params: SamplingParams, eos_id: int, requests: Sequence[Request]) -> list[Any]:
    """One ``vllm.SamplingParams`` per request (``sampling_params_cls`` is ``vllm.SamplingParams``), with its own token limit."""
    return [
        sampling_params_cls(
            n=1, temperature=params.temperature, top_p=params.top_p, max_tokens=request.token_limit(params),
            logprobs=0, seed=seed, ignore_eos=True, stop_token_ids=[eos_id], detokenize=False,
        )
        for request, seed in zip(requests, request_seeds(params.seed, len(requests)))
    ]


def to_completion(output: Any) -> Completion:
    """Convert one ``vllm.RequestOutput``: its first sample's token ids, their log-probs and whether EOS ended it.

    ``logprobs`` holds, per generated token, a mapping token id -> ``Logprob`` (with ``.logprob``)
    that contains the sampled token.
    """
    sample = output.outputs[0]
    token_ids = list(sample.token_ids)
    if sample.logprobs is None or len(sample.logprobs) != len(token_ids):
        raise ValueError("vLLM returned no log-prob for some generated token; sampling needs logprobs=0")
    logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs, token_ids)]
    return Completion(token_ids=token_ids, logprobs=logprobs, finished=sample.finish_reason == "stop")


class WeightLoaderExtension:
    """Mixed into every vLLM worker (``worker_extension_cls``) to receive the trainer's weights."""

    def tsctl_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """Load (HF name, tensor) pairs into the worker's model (vLLM shards and fuses them itself)."""
        self.model_runner.model.load_weights(weights=weights)


class VLLMEngine:
    """Samples with vLLM from a local Hugging Face model folder.

    It reports no entropies or prefix log-probs (``reports_token_stats`` is False): vLLM's kernels
    differ from the trainer's, so the trainer recomputes pi_old itself.

    Args:
        model_path: folder written by ``save_pretrained`` (weights, config, tokenizer).
        eos_id: token that ends a sample.
        dtype: parameter dtype (``auto``, ``bfloat16``, ``float16``, ``float32``).
        gpu_memory_utilization: share of GPU memory vLLM may take.
        tensor_parallel_size: GPUs the model is split over.
        max_model_len: longest prompt + response; None takes the model's.
        seed: seed of vLLM's own generators.
    """

    reports_token_stats = False

    def __init__(
        self,
        model_path: str,
        eos_id: int,
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        max_model_len: int | None = None,
        seed: int = 0,
    ) -> None:
        vllm = import_vllm()
        if tensor_parallel_size == 1:
            # Keep the engine in this process so weight updates are handed over without copies.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._sampling_params_cls = vllm.SamplingParams
        self.eos_id = eos_id
        self.llm = vllm.LLM(
            model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len, seed=seed,
            logprobs_mode="processed_logprobs", worker_extension_cls=f"{__name__}.WeightLoaderExtension",
        )

    def generate(self, requests: Sequence[Request], params: SamplingParams) -> list[Completion]:
        """Sample one completion per request, in request order (see :class:`~tsctl.engines.base.Engine`)."""
        if not requests:
            return []
        outputs = self.llm.generate(
            build_prompts(requests),
            build_sampling_params(self._sampling_params_cls, params, self.eos_id, requests),
            use_tqdm=False,
        )
        return [to_completion(output) for output in outputs]

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load the trainer's weights (HF parameter names) into every vLLM worker."""
        self.llm.collective_rpc("tsctl_load_weights", args=(list(state_dict.items()),))
