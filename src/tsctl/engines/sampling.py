"""Token sampling of the ``hf`` engine: temperature, nucleus (top-p), forced prefix tokens, one uniform per row."""

from __future__ import annotations

import torch

from tsctl.engines.base import SamplingParams


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set to -inf the logits outside the nucleus: the smallest top set of tokens with mass >= top_p.

    Args:
        logits: [B, V] float logits (already divided by the temperature).
        top_p: nucleus mass in (0, 1); the most likely token is always kept.

    Returns:
        [B, V] logits, -inf outside the nucleus.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    sorted_probs = sorted_logits.softmax(dim=-1)
    outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
    return logits.masked_fill(outside.scatter(-1, order, outside), float("-inf"))


def sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator, forced: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw one token per row, with its log-probability and the entropy of the row's distribution.

    Tokens are drawn from softmax(logits / temperature) restricted to the top-p nucleus and
    renormalised; the log-probability is under that distribution. The entropy is that of
    softmax(logits / temperature) before the nucleus cut (what the trainer measures). At temperature
    0 the token is the argmax and both come from the model's own distribution (temperature 1).

    Rows with a ``forced`` token (a prefix being fed) return it instead of their draw (every row
    still draws, so the generator advances alike), with its log-probability under
    softmax(logits / temperature) before the nucleus cut, like the entropy (a forced token may lie
    outside the nucleus): never the drawn token's.

    Args:
        logits: [B, V] next-token logits, any float dtype.
        params: temperature and top_p.
        generator: source of randomness, on the logits' device.
        forced: [B] (long) token each row must take, -1 where the row samples; None: all sample.

    Returns:
        tokens [B] (long), their log-probabilities [B] and the entropies [B] (float32).
    """
    logits = logits.float()
    if params.temperature != 0:
        logits = logits / params.temperature
    full = logits.log_softmax(dim=-1)
    entropy = -(full.exp() * full).sum(dim=-1)
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        logprobs = full
    else:
        logprobs = top_p_filter(logits, params.top_p).log_softmax(dim=-1) if params.top_p < 1 else full
        tokens = inverse_cdf_sample(logprobs.exp(), generator)
    if forced is None:
        return tokens, logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1), entropy
    forcing = forced >= 0
    tokens = torch.where(forcing, forced, tokens)
    chosen = torch.where(forcing, full.gather(1, tokens.unsqueeze(1)).squeeze(1), logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1))
    return tokens, chosen, entropy


def inverse_cdf_sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Draw one index per row of probs [B, V] (zeros allowed) with one uniform number per row.

    Cheaper than ``torch.multinomial``, which draws V random numbers per row. Returns [B] (long).
    """
    cdf = probs.cumsum(dim=-1)
    u = torch.rand((probs.shape[0], 1), generator=generator, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    # u < cdf[:, -1] always, so the clamp only guards against a rand() that returns 1.0.
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=probs.shape[1] - 1)
