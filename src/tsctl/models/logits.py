"""The LM head as the trainer applies it: the output embeddings, then the model's own logits post-processing.

The training forwards run the decoder and apply the LM head only where it is needed (response
positions, in chunks), so they cannot call the model's whole ``forward``. Some architectures change
the logits after the output embeddings in that forward; the rollout engine runs the whole forward,
so the trainer must apply the same change or its log-probs (and every importance ratio) disagree
with the engine's from step 0. Handled, exactly as the models' forwards write them:

- ``config.final_logit_softcapping`` (Gemma 2, Gemma 3): ``cap * tanh(logits / cap)``;
- ``model.logit_scale`` (Cohere, Cohere 2): ``logits * logit_scale``;
- ``config.logits_scaling`` (Granite and its MoE variants): ``logits / logits_scaling``.

Any other post-processing is caught by :func:`logits_head`: it compares, once per model, the
model's own forward with decoder + head on a few tokens, and refuses the model when they differ.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from tsctl.models.loading import ModelLoadError

PROBE_TOKENS = 8
"""Tokens of the probe forward that checks the head against the model's own forward."""


@dataclass(frozen=True)
class LogitsHead:
    """Output embeddings plus the known post-processing of ``model``'s forward.

    Attributes:
        projection: the output embeddings (``model.get_output_embeddings()``).
        scale: Cohere's ``logit_scale`` (multiplies), or None.
        divisor: Granite's ``logits_scaling`` (divides), or None.
        softcap: Gemma's ``final_logit_softcapping``, or None.
    """

    projection: torch.nn.Module
    scale: float | None = None
    divisor: float | None = None
    softcap: float | None = None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [..., V] of final hidden states [..., d], as the model's forward computes them."""
        logits = self.projection(hidden)
        if self.scale is not None:
            logits = logits * self.scale
        if self.divisor is not None:
            logits = logits / self.divisor
        if self.softcap is not None:
            logits = logits / self.softcap
            logits = torch.tanh(logits)
            logits = logits * self.softcap
        return logits

    def describe(self) -> str:
        """The post-processing applied, for messages (``none`` when there is none)."""
        parts = [f"{name}={value:g}" for name, value in (("logit_scale", self.scale), ("logits_scaling", self.divisor), ("final_logit_softcapping", self.softcap)) if value is not None]
        return ", ".join(parts) or "none"


_HEADS: "weakref.WeakKeyDictionary[torch.nn.Module, LogitsHead]" = weakref.WeakKeyDictionary()


def known_head(model: PreTrainedModel) -> LogitsHead:
    """The head of ``model`` with the post-processing its config or attributes declare (unchecked)."""
    config = model.config
    scale = getattr(model, "logit_scale", None)
    return LogitsHead(
        projection=model.get_output_embeddings(),
        scale=float(scale) if isinstance(scale, (int, float)) else None,
        divisor=_number(getattr(config, "logits_scaling", None)),
        softcap=_number(getattr(config, "final_logit_softcapping", None)),
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def logits_head(model: PreTrainedModel) -> LogitsHead:
    """The head the trainer applies to ``model``'s final hidden states, checked once per model.

    Raises:
        ModelLoadError: ``model``'s forward post-processes its logits in a way the head does not
            reproduce (an architecture tsctl does not know).
    """
    head = _HEADS.get(model)
    if head is None:
        head = known_head(model)
        _check(model, head)
        _HEADS[model] = head
    return head


def _check(model: PreTrainedModel, head: LogitsHead) -> None:
    """Compare the model's own forward with decoder + ``head`` on a few tokens (in eval mode, no grad).

    Both sides run the same operations in the same (autocast) context, so a handled model matches to
    float rounding; a missing transformation shows as a gap of the logits' own magnitude.
    """
    if head.projection is None:
        raise ModelLoadError(f"{type(model).__name__} has no output embeddings; tsctl trains causal LMs with an LM head")
    device = next(model.parameters()).device
    vocab = head.projection.weight.shape[0]
    ids = (torch.arange(1, PROBE_TOKENS + 1, device=device) % vocab)[None]  # [1, PROBE_TOKENS]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            expected = model(input_ids=ids).logits.float()
            got = head(model.get_decoder()(input_ids=ids).last_hidden_state).float()
    finally:
        model.train(was_training)
    gap = float((got - expected).abs().max())
    if not gap <= 1e-4 * (1.0 + float(expected.abs().max())):
        raise ModelLoadError(
            f"{type(model).__name__} post-processes its logits in a way tsctl does not reproduce: its forward differs "
            f"from output embeddings + known post-processing ({head.describe()}) by up to {gap:.3g}, so trainer and "
            "engine log-probs would disagree; tsctl handles final_logit_softcapping (Gemma 2/3), logit_scale (Cohere) "
            "and logits_scaling (Granite): train a model whose logits are one of these"
        )
