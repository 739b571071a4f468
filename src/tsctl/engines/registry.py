"""The engine registry (``engine.name``): each engine registers itself in its own module with what it declares.

An engine is one module of :mod:`tsctl.engines` (``hf``: :mod:`tsctl.engines.hf`; ``vllm``: :mod:`tsctl.engines.vllm`)
registering a builder of :class:`EngineBuild` -> :class:`~tsctl.engines.base.Engine`; its own settings are a
dataclass beside it (``settings=``; keys ``engine.<name>.*``, :mod:`tsctl.config.blocks`), given to the builder as
:attr:`EngineBuild.settings`. :mod:`tsctl.engines.factory` builds the one a config names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import PreTrainedModel

from tsctl.config.registry import Registry
from tsctl.config.schema import EngineConfig
from tsctl.engines.base import Demand, Engine


@dataclass(frozen=True)
class EngineBuild:
    """What an engine builder gets: the engine config and the model it samples.

    Attributes:
        cfg: the engine config (name, the sampling settings, batch size).
        model: the policy; ``hf`` samples with this very object, ``vllm`` loads ``model_path`` (and is sized by
            :mod:`tsctl.engines.vllm_sizing` within the model's context).
        end_ids: the tokens that end a sample (``PromptFormatter.end_ids``).
        pad_id: token used for padding.
        model_path: folder holding the model's ``save_pretrained`` files (an engine that loads its own copy needs it).
        seed: the engine's sampling seed (``hf`` reseeds per call from the sampling params instead).
        compute_dtype: the in-process engine's autocast dtype (``model.compute_dtype`` resolved); None
            computes in the parameters' dtype.
        demand: what the command will ask of the engine, computed when an engine that is sized by it is built
            (``vllm``); None: unknown (the model's context, ``engine.batch_size`` sequences).
        log_dir: where an engine with a log of its own writes it (``vllm``); None: the system's temporary folder.
        settings: the engine's own settings block (``engine.<name>``), or None for an engine that declares none.
    """

    cfg: EngineConfig
    model: PreTrainedModel
    end_ids: tuple[int, ...]
    pad_id: int
    model_path: str | None = None
    seed: int = 0
    compute_dtype: torch.dtype | None = None
    demand: Callable[[], Demand] | None = None
    log_dir: Path | None = None
    settings: Any = None


def _no_check(cfg: Any, settings: Any) -> None:
    """An engine that refuses no setting."""


ENGINES: Registry[Callable[[EngineBuild], Engine]] = Registry(
    "engine", __package__, key="engine.name", check=_no_check, runs_here=_no_check, in_process=False, own_logprobs=False,
)
"""Engine builders by ``engine.name``, from any module of :mod:`tsctl.engines`. Each declares ``settings`` (its block,
``engine.<name>.*``), ``check`` (``fn(TsctlConfig, settings)``: the composed config's settings it refuses, raising
ConfigError), ``runs_here`` (``fn(EngineConfig, settings)``: what this machine cannot run, asked before any run folder
is made), ``in_process`` (it samples the model object it is given: the engine of older snapshots, seed models and
warm-up scoring) and ``own_logprobs`` (its log-probs may stand for the trainer's, ``trainer.old_logprobs=engine``)."""
