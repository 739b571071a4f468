"""Log-probs and entropies of target tokens from final hidden states, the LM head applied chunk by chunk.

Full logits are ``[B, T, V]``: 7.5 GB in float32 for one 8k-token row at a 152k vocabulary, and a
backward pass would keep them (and their softmax) alive until it runs. Here the hidden states are
flattened to ``[N, d]`` positions and cut into chunks of ``chunk_positions``; each chunk's logits
are computed, reduced to one log-prob (and entropy) per position, and dropped. With grad, each chunk
runs under :func:`torch.utils.checkpoint.checkpoint`, so backward keeps only the chunk's hidden
states and recomputes its logits when it gets there: the peak holds one chunk's logits, never all.

With a single chunk the operations are exactly those of the unchunked computation (same matmul
shape, same reductions), so results are bit-identical to it.

There is no fused head kernel here: the maintained ones (Liger's fused linear cross-entropy) are
Triton kernels for GPUs, and on the built-in model on CPU the head is about 1% of the update's FLOPs
(a 100-token vocabulary), so fusing it could not show there.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.utils.checkpoint import checkpoint

FLOAT32_BYTES = 4


def chunk_positions(chunk_mib: float, vocab_size: int) -> int:
    """Positions per chunk whose float32 logits take about ``chunk_mib`` MiB (at least one)."""
    return max(1, int(chunk_mib * 2**20) // (FLOAT32_BYTES * vocab_size))


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Log-probability of each target token, ``z[target] - logsumexp(z)``, in float32.

    Equal to ``log_softmax(z).gather(target)`` without materialising the log-softmax.

    Args:
        logits: ``[..., V]``; position ``i`` predicts ``targets[i]``.
        targets: ``[...]`` int64 token ids.

    Returns:
        ``[...]`` float32 log-probs.
    """
    z = logits.float()
    return z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of the softmax at every position, ``logsumexp(z) - sum softmax(z) * z``, in float32.

    Args:
        logits: ``[..., V]``, finite.

    Returns:
        ``[...]`` float32 entropies.
    """
    z = logits.float()
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)


def _chunk_stats(
    hidden: torch.Tensor, targets: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor], temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, ...]:
    """Log-probs [n] (and entropies [n]) of ``targets`` [n] from hidden states [n, d]."""
    logits = head(hidden).float()  # [n, V]
    if temperature != 1.0:
        logits = logits / temperature
    logprobs = token_logprobs(logits, targets)
    if not with_entropy:
        return (logprobs,)
    return logprobs, entropy_from_logits(logits)


def head_token_stats(
    head: Callable[[torch.Tensor], torch.Tensor],
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    positions_per_chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs and entropies at the sampling temperature, never materialising all logits at once.

    Args:
        head: hidden states [n, d] -> logits [n, V] (the LM head with its post-processing).
        hidden: [B, T, d] final hidden states; position ``(i, j)`` predicts ``targets[i, j]``.
        targets: [B, T] token ids.
        temperature: logits are divided by it before the softmax.
        with_entropy: also return the entropies.
        positions_per_chunk: positions per chunk; None = all at once.

    Returns:
        log-probs [B, T] (float32) and entropies [B, T] (float32) or None.
    """
    batch, steps, width = hidden.shape
    flat_hidden = hidden.reshape(batch * steps, width)
    flat_targets = targets.reshape(batch * steps)
    size = max(1, positions_per_chunk or batch * steps)
    recompute = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in _parameters(head)))
    logprobs, entropies = [], []
    for start in range(0, batch * steps, size):
        args = (flat_hidden[start : start + size], flat_targets[start : start + size], head, temperature, with_entropy)
        if recompute:
            out = checkpoint(_chunk_stats, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            out = _chunk_stats(*args)
        logprobs.append(out[0])
        if with_entropy:
            entropies.append(out[1])
    logprobs_all = torch.cat(logprobs).reshape(batch, steps)
    return logprobs_all, (torch.cat(entropies).reshape(batch, steps) if with_entropy else None)


def _parameters(head: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.nn.Parameter]:
    """Parameters of ``head`` (a module, or an object holding one as ``projection``)."""
    module = head if isinstance(head, torch.nn.Module) else getattr(head, "projection", None)
    return list(module.parameters()) if isinstance(module, torch.nn.Module) else []
