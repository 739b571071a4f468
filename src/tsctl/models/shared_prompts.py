"""The policy forward with each distinct prompt computed once, its keys and values shared by its rows.

The ``n`` samples of a GRPO group share their prompt, so a padded batch runs the same prompt tokens
through the model up to ``n`` times, forward and backward. Here the batch is split in two forwards:

1. the *contexts* (every distinct prompt but its last token) run once each, left-padded, filling a
   key/value cache;
2. the cache is indexed out to the rows, and the *continuations* (each row's last prompt token, then
   its response tokens but the last) run with it, right-padded, every row attending to its own
   context and to its own earlier continuation tokens.

The continuation's hidden state at position ``j`` predicts response token ``j``. Gradients flow back
through the cache into the context forward (summed over the rows that share it), so the result,
log-probs and gradients alike, equals the padded full-sequence forward up to float rounding; the
prompt tokens' share of the work falls by the number of rows per prompt. It needs a model that takes
a 4D additive attention mask, position ids and a cache (``eager`` or ``sdpa`` attention), and
prompts of at least two tokens; :func:`can_share_prompts` says when it applies.
"""

from __future__ import annotations

import inspect

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import DynamicCache

from tsctl.models.padding import additive_mask, left_pad, prefill_mask


def prompt_groups(input_ids: torch.Tensor, prompt_lengths: torch.Tensor) -> tuple[list[tuple[int, ...]], torch.Tensor]:
    """The distinct prompts of a batch and each row's index among them.

    Args:
        input_ids: [B, L] rows that start with their prompt.
        prompt_lengths: [B] each row's prompt length.

    Returns:
        the distinct prompts in order of first appearance, and the index [B] (long) of each row's.
    """
    unique: dict[tuple[int, ...], int] = {}
    rows = input_ids.tolist()
    index = [unique.setdefault(tuple(row[:n]), len(unique)) for row, n in zip(rows, prompt_lengths.tolist())]
    return list(unique), torch.tensor(index, dtype=torch.long, device=input_ids.device)


def sliding_window(model: PreTrainedModel) -> int | None:
    """The attention window of a model with sliding-window layers (Gemma 2/3, Mistral, ...), else None."""
    config = model.config
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if not window or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return int(window)


def can_share_prompts(model: PreTrainedModel, prompts: list[tuple[int, ...]], rows: int, longest: int = 0) -> bool:
    """Whether :func:`shared_prompt_hidden` applies and saves work: a mask-taking attention, fewer
    distinct prompts than rows, every prompt at least two tokens long, and no row of ``longest``
    tokens reaching past a sliding attention window (the explicit mask here has no window)."""
    attention = getattr(model.config, "_attn_implementation", "eager")
    window = sliding_window(model)
    fits = window is None or longest <= window
    return attention in ("eager", "sdpa") and len(prompts) < rows and min(len(p) for p in prompts) >= 2 and fits


def shared_prompt_hidden(
    model: PreTrainedModel,
    prompts: list[tuple[int, ...]],
    group: torch.Tensor,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
) -> torch.Tensor:
    """Final hidden states predicting each response token, each distinct prompt run once.

    Args:
        prompts: the U distinct prompts (each at least two tokens).
        group: [B] index into ``prompts`` of each row's prompt.
        response_ids: [B, T] response tokens, right-padded.
        response_mask: [B, T] bool, real response tokens.

    Returns:
        [B, T, d] hidden states; position ``j`` of row ``i`` predicts ``response_ids[i, j]``.
    """
    decoder = model.get_decoder()
    device, dtype = response_ids.device, model.dtype
    cache_arg = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"
    cache = DynamicCache()

    # Padding slots hold token 0; no real token attends to them.
    contexts, context_real = left_pad([p[:-1] for p in prompts], 0, device)  # [U, C]
    positions = (context_real.cumsum(dim=1) - 1).clamp_min(0)
    decoder(
        input_ids=contexts, attention_mask=prefill_mask(context_real, dtype), position_ids=positions,
        use_cache=True, **{cache_arg: cache},
    )
    cache.reorder_cache(group)  # [B, H, C, D]: a differentiable gather, so gradients sum over a prompt's rows

    batch, steps = response_ids.shape
    last_prompt_token = torch.tensor([p[-1] for p in prompts], dtype=torch.long, device=device)[group]
    inputs = torch.cat([last_prompt_token[:, None], response_ids[:, : steps - 1]], dim=1)  # [B, T]
    real = torch.cat([response_mask.new_ones(batch, 1), response_mask[:, : steps - 1]], dim=1)  # [B, T]
    prompt_lengths = torch.tensor([len(p) for p in prompts], device=device)[group]
    positions = prompt_lengths[:, None] - 1 + torch.arange(steps, device=device)  # [B, T]
    causal = torch.ones(steps, steps, dtype=torch.bool, device=device).tril()
    # A pad query sees itself, so its softmax stays finite; no real token sees a pad.
    own = (causal & real[:, None, :]) | torch.eye(steps, dtype=torch.bool, device=device)  # [B, T, T]
    allowed = torch.cat([context_real[group][:, None, :].expand(-1, steps, -1), own], dim=2)  # [B, T, C + T]
    return decoder(
        input_ids=inputs, attention_mask=additive_mask(allowed[:, None], dtype), position_ids=positions,
        use_cache=True, **{cache_arg: cache},
    ).last_hidden_state
