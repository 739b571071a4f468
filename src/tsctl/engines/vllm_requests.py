"""What goes into and comes out of vLLM's ``generate``: the engine's requests as ``TokensPrompt`` dicts and
``SamplingParams`` (one per token limit, no seed: see :mod:`tsctl.engines.vllm`), and each ``RequestOutput`` as a
:class:`~tsctl.engines.base.Completion` with its sampled tokens' log-probs."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from tsctl.engines.base import Completion, Request, SamplingParams


def build_prompts(requests: Sequence[Request]) -> list[dict[str, list[int]]]:
    """vLLM ``TokensPrompt`` dicts: prompt ids followed by prefix ids."""
    return [{"prompt_token_ids": [*r.prompt_ids, *r.prefix_ids]} for r in requests]


def build_sampling_params(sampling_params_cls: Any, params: SamplingParams, end_ids: Sequence[int], requests: Sequence[Request]) -> list[Any]:
    """One ``vllm.SamplingParams`` per request (``sampling_params_cls`` is ``vllm.SamplingParams``).

    Requests with the same token limit share one object (vLLM copies it per request). No seed:
    see the module docstring.
    """
    stop = sorted({int(i) for i in end_ids})
    by_limit: dict[int, Any] = {}
    for request in requests:
        limit = request.token_limit(params)
        if limit not in by_limit:
            by_limit[limit] = sampling_params_cls(
                n=1, temperature=float(params.temperature), top_p=float(params.top_p), max_tokens=limit,
                logprobs=0, stop_token_ids=stop, ignore_eos=False, detokenize=False,
            )
    return [by_limit[request.token_limit(params)] for request in requests]


def to_completion(output: Any, end_ids: Iterable[int]) -> Completion:
    """Convert one ``vllm.RequestOutput``: its first sample's token ids, their log-probs and whether an end token ended it.

    ``logprobs`` holds, per generated token, a mapping token id -> ``Logprob`` (with ``.logprob``)
    that contains the sampled token.
    """
    sample = output.outputs[0]
    token_ids = [int(t) for t in sample.token_ids]
    if sample.logprobs is None or len(sample.logprobs) != len(token_ids):
        raise ValueError("vLLM returned no log-prob for some generated token; sampling needs logprobs=0")
    logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs, token_ids)]
    finished = sample.finish_reason == "stop"
    if finished and (not token_ids or token_ids[-1] not in set(end_ids)):
        raise ValueError(f"vLLM stopped a sample at token {token_ids[-1:]} that is not an end token {sorted(end_ids)}")
    return Completion(token_ids=token_ids, logprobs=logprobs, finished=finished)
