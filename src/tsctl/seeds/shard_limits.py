"""What the seed shards a command reads must fit, from the model and engine it runs (see :mod:`tsctl.io.shard_contents`)."""

from __future__ import annotations

from transformers import PreTrainedModel

from tsctl.engines.base import Engine
from tsctl.io.shard_contents import RowLimits
from tsctl.seeds.sources import SOURCES


def unknown_pi_b() -> tuple[str, ...]:
    """The ``checkpoint`` labels of the seed sources whose pi_b is unknown (a trace's): their rows carry NaN log-probs."""
    return tuple(SOURCES.needs(name).label for name in SOURCES.names() if not SOURCES.needs(name).known_logprobs)


def row_limits(model: PreTrainedModel | None, engine: Engine | None, per_prompt: int, prompts: int | None = None) -> RowLimits:
    """The limits of a seed shard's rows: ``model``'s vocabulary (its embedding rows), ``engine``'s context, ``per_prompt``
    seeds for each of ``prompts`` prompts (None: any number); without a model or engine (not loaded yet) those go unchecked."""
    return RowLimits(
        vocab=model.get_input_embeddings().num_embeddings if model is not None else None,
        context=engine.context_length if engine is not None else None,
        per_prompt=per_prompt,
        prompts=prompts,
        unknown_pi_b=unknown_pi_b(),
    )
