"""The rollout engine interface shared by the ``hf`` and ``vllm`` backends.

An engine samples continuations of token-id prompts. Each request may carry a prefix (token ids
written by another policy) that the sample continues from: that is how Thinking Seeds hands a
behaviour-policy prefix to the current policy. Engines never re-encode text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample.

    Attributes:
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus mass in (0, 1].
        max_new_tokens: most tokens generated per request (the prefix does not count).
        seed: seed of the sampler's generator, for reproducible draws (the ``hf`` engine reseeds
            with it at every call; ``vllm`` samples from its one engine seed instead, see
            :mod:`tsctl.engines.vllm`).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    seed: int = 0


@dataclass(frozen=True)
class Request:
    """One sample to draw.

    Attributes:
        prompt_ids: token ids of the prompt, shape [P].
        prefix_ids: token ids the sample must continue from (a behaviour-policy prefix), shape [S];
            empty for a plain on-policy sample.
        max_new_tokens: this request's own limit on generated tokens (at most the sampling params'
            ``max_new_tokens``, which applies when it is None). Thinking Seeds sets it so that prefix
            plus continuation fit the response budget.
    """

    prompt_ids: Sequence[int]
    prefix_ids: Sequence[int] = field(default_factory=tuple)
    max_new_tokens: int | None = None

    def token_limit(self, params: SamplingParams) -> int:
        """Most tokens to generate for this request under ``params``."""
        if self.max_new_tokens is None:
            return params.max_new_tokens
        if self.max_new_tokens < 1:
            raise ValueError(f"a request's max_new_tokens must be >= 1, got {self.max_new_tokens}")
        return min(self.max_new_tokens, params.max_new_tokens)


@dataclass(frozen=True)
class Demand:
    """What a command will ask of its engine, known before the engine is built (the ``vllm`` engine is sized by it).

    Attributes:
        context: tokens of the longest request: the longest prompt + ``engine.max_new_tokens`` (+ 1 where a seed
            prefix may take the whole budget and is continued by one more token); None: unknown.
        requests: most requests one ``generate`` call sends; None: unknown.
        adapters: most LoRA adapters sampled from while the engine lives, where the policy carries one: its own and the
            behaviour pool's snapshots (``seeds.pool_size``) that an engine serving adapters samples without a weight load.
    """

    context: int | None = None
    requests: int | None = None
    adapters: int = 1


@dataclass
class Completion:
    """What the engine generated for one request.

    Attributes:
        token_ids: generated token ids, shape [G] (excludes prompt and prefix; includes the end
            token that stopped it, if any).
        logprobs: log-probability of each generated token under the sampling distribution, shape [G].
        finished: True when the sample ended with one of the end tokens
            (:func:`tsctl.models.prompts.end_token_ids`), False when cut at max_new_tokens.
        entropies: entropy (nats) of the model's next-token distribution at the sampling
            temperature (before any top-p cut) at each generated token, shape [G]; None when the
            backend does not report it.
        prefix_entropies: entropies, as ``entropies``, at each of the request's prefix tokens
            (teacher-forced after the prompt), shape [S]; None when not reported.
        prefix_logprobs: log-probability of each prefix token under this engine's policy (the
            tempered distribution before any top-p cut), shape [S]; None when not reported. The
            ratio of a prefix token is taken against pi_b's stored log-prob, never this one.

    At temperature 0, log-probs and entropies are those of the model's own distribution
    (temperature 1).
    """

    token_ids: list[int]
    logprobs: list[float]
    finished: bool
    entropies: list[float] | None = None
    prefix_entropies: list[float] | None = None
    prefix_logprobs: list[float] | None = None


class Engine(Protocol):
    """A rollout backend.

    ``reports_token_stats`` is True when every completion carries ``entropies`` and
    ``prefix_entropies``, and its log-probs are computed with the trainer's own weights and numerics,
    so the trainer may take pi_old from the engine instead of recomputing it.

    A training step calls ``generate`` (any number of times), then ``sleep``, runs the update, then
    ``load_weights`` and ``wake_up``: an engine that holds its own copy of the weights (vLLM, on the
    trainer's GPU) frees its memory for the update in between. Engines without such memory make
    ``sleep`` and ``wake_up`` no-ops.
    """

    reports_token_stats: bool
    context_length: int | None
    """Most tokens of prompt + prefix + response one request may take; None when the engine knows no limit."""

    def generate(self, requests: Sequence[Request], params: SamplingParams) -> list[Completion]:
        """Sample one completion per request, in request order."""
        ...

    def sleep(self) -> None:
        """Release the engine's memory until the next ``load_weights`` and ``wake_up`` (no ``generate`` in between)."""
        ...

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Replace the engine's weights with the trainer's current ones (asleep or awake); nothing
        computed with the old weights (cached keys and values) is reused afterwards."""
        ...

    def wake_up(self) -> None:
        """Make the engine ready to ``generate`` again after ``sleep`` and ``load_weights``."""
        ...


@runtime_checkable
class AdapterEngine(Engine, Protocol):
    """An engine that may serve its policy as a LoRA adapter over a base model (``vllm`` with ``model.lora``), and then
    samples other adapters of that base (behaviour snapshots) without loading weights."""

    serves_adapters: bool
    """Whether the policy is served as an adapter, so that ``with_adapter`` applies."""

    def with_adapter(self, folder: Path) -> Engine:
        """An engine sampling from the adapter folder ``folder`` over this engine's base model."""
        ...
