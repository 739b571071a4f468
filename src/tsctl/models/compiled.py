"""``trainer.compile``: the policy update's decoder layers compiled with ``torch.compile``.

On a small model most of a training forward and backward is fixed per-op cost: every RMSNorm, rotary
embedding, SiLU gate and residual add is its own kernel call, and its own saved activation. Compiled,
each decoder layer's elementwise work runs fused between its matmuls, in forward and in backward.

Only the layers are compiled (regional compilation): every layer of a model runs the same code, so one
graph serves them all and compiling costs one layer's worth; the embedding, the LM head's chunks and
whatever chooses the forward (packing, prompt sharing, the attention rows) stay in Python. Shapes are
dynamic (``dynamic=True``): a packed micro-batch of any length, or a padded one of any rows and width,
reuses the graph; a new graph is compiled only for what the graph cannot cover (a new number of
attention-row blocks, a dimension of 1), which :func:`compile_stats` counts.

The compiled forwards are switched in only around the update's forwards (:meth:`CompiledLayers.active`):
the rollout engine's prefill and decode, the no-grad recomputes and the evaluation run the layers as
they are, so nothing else compiles (a decode step's cache updates would make a new graph at every step).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, NamedTuple

import torch
from torch._dynamo.utils import compilation_time_metrics, counters
from torch._dynamo import config as dynamo_config
from torch.fx.experimental import _config as fx_config
from transformers import PreTrainedModel

from tsctl.config.errors import ConfigError
from tsctl.models.precision import model_device

_COMPILE_TIMER = "_compile.compile_inner"
"""The phase ``torch._dynamo`` times around each compile of a frame (tracing and the backend's forward and
backward code generation)."""


_CHECKPOINTED_SIDE_EFFECTS = {"skip_fwd_side_effects_in_bwd_under_checkpoint": True}
"""Under activation checkpointing a layer's forward runs inside the checkpoint's higher-order op, where dynamo refuses
any write to state outside it, and transformers (5.2x) writes one in every layer: its output-capturing hooks set a
context variable (``output_capturing.CompileableContextVar``). Refused, the whole layer falls back to eager and
nothing compiles; allowed, the write is not replayed when backward recomputes the layer, which changes nothing here
(the update captures no hidden states or attentions)."""

class CompileStats(NamedTuple):
    """What this process has compiled so far: distinct graphs, and seconds spent compiling them."""

    graphs: int
    seconds: float


def compile_stats() -> CompileStats:
    """The graphs ``torch.compile`` has built in this process, and the seconds it spent building them."""
    return CompileStats(int(counters["stats"]["unique_graphs"]), float(sum(compilation_time_metrics.get(_COMPILE_TIMER, []))))


class CompiledLayers:
    """The decoder layers of ``model``, each with a compiled forward used only within :meth:`active`.

    Args:
        model: a causal LM whose decoder (``model.get_decoder()``) holds its blocks in ``layers`` (Llama, Qwen2,
            Mistral and most decoder-only families; with a peft adapter injected, its layers carry it).

    Raises:
        ConfigError: the model is on the CPU and no C++ compiler is found (the CPU backend compiles C++), or its decoder
            keeps its blocks elsewhere.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        if model_device(model).type == "cpu":
            _check_cpp_compiler()
        layers = getattr(model.get_decoder(), "layers", None)
        if not isinstance(layers, torch.nn.ModuleList):
            raise ConfigError("trainer.compile", f"{type(model).__name__} keeps no list of decoder layers (model.get_decoder().layers) to "
                              "compile; set trainer.compile=false")
        self.layers: list[torch.nn.Module] = list(layers)
        self._own: list[Callable[..., Any] | None] = [layer.__dict__.get("forward") for layer in self.layers]
        self._compiled = [torch.compile(layer.forward, dynamic=True) for layer in self.layers]

    @contextmanager
    def active(self) -> Iterator[None]:
        """Within the block every layer's forward is its compiled one (the module's hooks, if any, still run around it)."""
        for layer, compiled in zip(self.layers, self._compiled):
            layer.forward = compiled
        try:
            # use_duck_shape off: two sizes equal by chance stay two symbols (no recompile when they differ)
            with fx_config.patch(use_duck_shape=False), dynamo_config.patch(**_CHECKPOINTED_SIDE_EFFECTS):
                yield
        finally:
            for layer, own in zip(self.layers, self._own):
                if own is None:
                    del layer.forward
                else:
                    layer.forward = own


def _check_cpp_compiler() -> None:
    """Refuse in one line, before any step, where the CPU backend would find no C++ compiler at the first update."""
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.exc import InvalidCxxCompiler

    try:
        get_cpp_compiler()
    except InvalidCxxCompiler:
        raise ConfigError(
            "trainer.compile", "compiling on the CPU needs a C++ compiler and none was found (g++ or clang++ on PATH, or "
            "CXX=<path>); install one (e.g. apt install g++) or set trainer.compile=false",
        ) from None
