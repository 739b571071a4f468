"""LoRA adapters served by the ``vllm`` engine: the base model loaded once, each adapter a ``LoRARequest``.

A policy that carries a peft adapter (``model.lora``) is served as vLLM's base model (the folder the adapter names)
started with ``enable_lora``, and :class:`AdapterServing` keeps what vLLM needs to apply adapters to it:

- **the policy's adapter**: every weight sync (:meth:`AdapterServing.publish`) writes the adapter's tensors alone into
  a new folder ``policy-<id>/`` and loads it under a new ``lora_int_id`` and name. vLLM caches a loaded adapter by
  its id and reads its folder again only when the id is new (or a request asks ``load_inplace``, which would re-read
  it at every engine step), so a fresh id is what makes the next sample use the new weights and never a stale copy.
  The previous version is then unloaded and its folder deleted. Prefix-cache blocks are hashed with the adapter's
  name, so no cached key or value of an older version is reused either.
- **the behaviour pool's snapshots**: an adapter folder written once (:mod:`tsctl.seeds.pool`) gets one
  ``LoRARequest`` of its own, by its path and the time its weights were written (:meth:`AdapterServing.snapshot`);
  :class:`SnapshotEngine` samples with it from the same engine, no weights loaded.

vLLM's LoRA layers wrap its linear projections only (for Llama, Mistral and Qwen: ``q/k/v/o_proj``,
``gate/up/down_proj``); an adapter on any other module (the embedding, the LM head) is refused in one line quoting
vLLM (:func:`unservable`). vLLM takes ``max_lora_rank`` from a fixed list (:data:`VLLM_RANKS`).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Protocol, Sequence

import torch

from tsctl.config.errors import ConfigError
from tsctl.engines.base import Completion, Request, SamplingParams
from tsctl.engines.vllm_weights import checkpoint_name
from tsctl.io.adapters import ADAPTER_WEIGHTS, adapter_file_tensors, write_adapter

VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM accepts (its ``MaxLoRARanks``); an adapter of a lower rank is served in the next one."""


def vllm_rank(rank: int) -> int:
    """vLLM's ``max_lora_rank`` for adapters of rank ``rank``: the smallest of :data:`VLLM_RANKS` that holds it.

    Raises:
        ConfigError: ``rank`` is above vLLM's largest.
    """
    fits = [r for r in VLLM_RANKS if r >= rank]
    if not fits:
        raise ConfigError("model.lora.rank", f"{rank} is above the largest LoRA rank vLLM serves ({VLLM_RANKS[-1]}); lower it or use engine=hf")
    return fits[0]


def unservable(err: Exception) -> ConfigError:
    """The one-line refusal of an adapter vLLM would not load, quoting vLLM's reason (its first line)."""
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ConfigError(
        "model.lora.target_modules",
        f"engine=vllm cannot serve this LoRA adapter; vLLM: {reason} (vLLM adapts the linear projections of the attention and MLP "
        "only); set model.lora.target_modules to those, or use engine=hf",
    )


class AdapterServing:
    """The adapters one vLLM engine serves: the policy's current version and the snapshots it was asked for.

    Args:
        config: the policy's peft ``LoraConfig`` (written beside every version of its weights).
        adapters: most adapters sampled from (:attr:`~tsctl.engines.base.Demand.adapters`): vLLM's ``max_loras`` and
            the adapters it keeps loaded in memory.
    """

    def __init__(self, config: Any, adapters: int) -> None:
        self.config, self.adapters = config, max(1, adapters)
        self.rank = vllm_rank(int(config.r))
        self.folder = Path(tempfile.mkdtemp(prefix="tsctl-vllm-adapters-"))
        weakref.finalize(self, shutil.rmtree, self.folder, True)
        self.ids = itertools.count(1)
        self.policy: Any = None
        """The ``LoRARequest`` of the policy's current adapter (None until the first :meth:`publish`)."""
        self.snapshots: dict[tuple[str, int], Any] = {}

    def settings(self) -> dict[str, Any]:
        """vLLM's ``LLM(...)`` settings for serving these adapters."""
        return dict(enable_lora=True, max_lora_rank=self.rank, max_loras=self.adapters, max_cpu_loras=self.adapters)

    def slot_bytes(self, model: torch.nn.Module, dtype_name: str) -> int:
        """What vLLM reserves for these adapters: ``max_loras`` slots of rank ``max_lora_rank`` on every adapted
        projection, from ``model``'s own adapter (rank ``config.r``) in vLLM's dtype ``dtype_name``."""
        per_rank = sum(p.numel() for name, p in model.named_parameters() if ".lora_" in name) / int(self.config.r)
        return int(per_rank * self.rank * self.adapters * getattr(torch, dtype_name).itemsize)

    def publish(self, llm: Any, state: dict[str, torch.Tensor]) -> None:
        """Serve the adapter in ``state`` (a model's ``state_dict``, any wrapper names) as the policy's from now on.

        Raises:
            ValueError: ``state`` holds no adapter weights.
            ConfigError: vLLM refuses the adapter (:func:`unservable`).
        """
        tensors = adapter_file_tensors({checkpoint_name(name): tensor for name, tensor in state.items()})
        if not tensors:
            raise ValueError("the weights hold no LoRA adapter, and this vLLM engine serves the policy as one (its model.lora)")
        number = next(self.ids)
        folder = self.folder / f"policy-{number}"
        folder.mkdir()
        write_adapter(folder, self.config, tensors)
        request = self._load(llm, f"policy-{number}", number, folder)
        if self.policy is not None:
            llm.llm_engine.remove_lora(self.policy.lora_int_id)
            shutil.rmtree(self.policy.lora_path, ignore_errors=True)
        self.policy = request

    def snapshot(self, llm: Any, folder: Path) -> Any:
        """The ``LoRARequest`` of the adapter folder ``folder`` (a behaviour snapshot), loaded the first time it is asked
        for; a folder written again gets a new one."""
        path = Path(folder).resolve()
        key = (str(path), (path / ADAPTER_WEIGHTS).stat().st_mtime_ns)
        if key not in self.snapshots:
            number = next(self.ids)
            self.snapshots[key] = self._load(llm, f"snapshot-{number}", number, path)
        return self.snapshots[key]

    def _load(self, llm: Any, name: str, number: int, folder: Path) -> Any:
        """Load the adapter in ``folder`` into vLLM as ``name`` / ``number``; its ``LoRARequest``."""
        from vllm.lora.request import LoRARequest

        request = LoRARequest(name, number, str(folder))
        try:
            llm.llm_engine.add_lora(request)
        except ValueError as err:
            raise unservable(err) from None
        return request


class AdapterSampler(Protocol):
    """The engine that serves the policy's adapter (:class:`~tsctl.engines.vllm.VLLMEngine`), as a snapshot samples
    through it."""

    @property
    def context_length(self) -> int: ...

    def sample(self, requests: Sequence[Request], params: SamplingParams, lora_request: Any) -> list[Completion]: ...


class SnapshotEngine:
    """Samples from a behaviour snapshot's adapter through the engine that serves the policy (same base, same seed
    stream); its log-probs, as the engine's, are never pi_b (``reports_token_stats`` is False).

    Args:
        engine: the vLLM engine serving the policy's adapter.
        request: the snapshot's ``LoRARequest`` (:meth:`AdapterServing.snapshot`).
    """

    reports_token_stats = False

    def __init__(self, engine: AdapterSampler, request: Any) -> None:
        self.engine, self.request = engine, request

    @property
    def context_length(self) -> int:
        return self.engine.context_length

    def generate(self, requests: Sequence[Request], params: SamplingParams) -> list[Completion]:
        """One completion per request from the snapshot's adapter, in request order."""
        return self.engine.sample(requests, params, self.request)

    def sleep(self) -> None:
        """Nothing: the engine that serves the policy sleeps and wakes with the trainer's step."""

    def wake_up(self) -> None:
        """Nothing (see :meth:`sleep`)."""

    def load_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        raise TypeError("a behaviour snapshot's adapter is fixed; load weights into the engine that serves the policy")
