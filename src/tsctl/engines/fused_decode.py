"""One decode step of a Llama-family model without its module calls, with fused projections.

At decode shapes on a CPU, a small model's step is dominated by fixed per-call costs: the HF forward
makes about 15 module calls per layer, each with its own hooks, checks and tensor reshapes, and two
of its matmul pairs (q/k/v, gate/up) read the same input. :class:`FusedDecoder` computes the same
function from the model's own weights with one matmul for q, k and v and one for gate and up, and
the engine's one-token attention (:func:`~tsctl.engines.decode_attention.decode_attention`'s math), writing keys
and values into the engine's cache. Attention reads each layer's whole cache buffer (zeroed beyond
the filled part, and never more than twice its size) with the unfilled tail masked: on CPU a
batched matmul over a contiguous buffer runs about 3x faster than over the strided view of its
filled part, which outweighs the extra positions. Prefill, and the LM head of every step, still run
as the model's own modules (hooks on the LM head apply).

It supports decoder-only models whose blocks are exactly RMSNorm, attention with q/k/v/o
projections (with or without biases) and rotary embeddings, RMSNorm, and a SiLU-gated MLP, every
layer attending to the full context: ``llama``, ``mistral`` and ``qwen2`` configurations without a
sliding window, built of plain ``nn.Linear``/``nn.Embedding`` modules with no hooks (a hook that changes
activations, or another module wrapping a projection, would be bypassed). A projection carrying a peft
LoRA adapter (``model.lora``) is computed from its merged weight ``W + (alpha / rank) B A`` (peft's own
``get_delta_weight``), as the model with the adapter merged would; one with its adapter switched off, from
``W``. :meth:`FusedDecoder.for_model` returns None for any other model, and the engine falls back to the
model's forward.

The fused weights are copies: build a decoder for each ``generate`` call, after the weights last
changed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.modules import module as torch_module
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")


@dataclass
class _Block:
    """One decoder block's weights, with q/k/v and gate/up concatenated along the output dimension."""

    input_norm: torch.Tensor  # [d]
    qkv: torch.Tensor  # [(H + 2 Hkv) D, d]
    qkv_bias: torch.Tensor | None  # [(H + 2 Hkv) D]
    out: torch.Tensor  # [d, H D]
    out_bias: torch.Tensor | None  # [d]
    post_norm: torch.Tensor  # [d]
    gate_up: torch.Tensor  # [2 I, d]
    down: torch.Tensor  # [d, I]


class FusedDecoder:
    """Next-token logits for one new token per row, from a supported model's weights.

    Args:
        model: the causal LM (see the module docstring for what is supported).
    """

    def __init__(self, model: PreTrainedModel) -> None:
        config = model.config
        decoder = model.get_decoder()
        attention = decoder.layers[0].self_attn
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = attention.head_dim
        self.scaling = attention.scaling
        self.eps = decoder.norm.variance_epsilon
        self.embed = decoder.embed_tokens.weight
        self.rotary = decoder.rotary_emb
        self.final_norm = decoder.norm.weight
        self.lm_head = model.get_output_embeddings()
        self.blocks = [self._block(layer) for layer in decoder.layers]

    @staticmethod
    def for_model(model: PreTrainedModel) -> "FusedDecoder | None":
        """A decoder for ``model``, or None when its architecture is not one this class computes exactly."""
        config = model.config
        if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES or getattr(config, "hidden_act", None) != "silu":
            return None
        if getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True):
            return None
        if any(t != "full_attention" for t in getattr(config, "layer_types", None) or ()):
            return None
        if getattr(config, "pretraining_tp", 1) != 1 or getattr(config, "mlp_bias", False):
            return None
        decoder = model.get_decoder()
        if type(decoder.embed_tokens) is not torch.nn.Embedding or _hooked(decoder):
            return None
        for layer in decoder.layers:
            attention, mlp = layer.self_attn, layer.mlp
            if any(hasattr(attention, name) for name in ("q_norm", "k_norm")):
                return None
            linears = [getattr(attention, f"{n}_proj") for n in "qkvo"] + [getattr(mlp, f"{n}_proj") for n in ("gate", "up", "down")]
            if any(type(m) is not torch.nn.Linear and not _lora_linear(m) for m in linears):
                return None
        return FusedDecoder(model)

    @staticmethod
    def _block(layer: torch.nn.Module) -> _Block:
        attention, mlp = layer.self_attn, layer.mlp
        projections = [_plain(p) for p in (attention.q_proj, attention.k_proj, attention.v_proj)]
        biases = [p.bias for p in projections]
        return _Block(
            input_norm=layer.input_layernorm.weight,
            qkv=torch.cat([_weight(p) for p in (attention.q_proj, attention.k_proj, attention.v_proj)]),
            qkv_bias=None if all(b is None for b in biases) else torch.cat(
                [b if b is not None else p.weight.new_zeros(p.out_features) for p, b in zip(projections, biases)]
            ),
            out=_weight(attention.o_proj),
            out_bias=_plain(attention.o_proj).bias,
            post_norm=layer.post_attention_layernorm.weight,
            gate_up=torch.cat([_weight(mlp.gate_proj), _weight(mlp.up_proj)]),
            down=_weight(mlp.down_proj),
        )

    def _norm(self, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm as Llama computes it: in float32, then back to the input dtype before the weight."""
        x = hidden.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x.to(hidden.dtype)

    def step(self, tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Cache) -> torch.Tensor:
        """Feed one token per row and return the next-token logits.

        Args:
            tokens: [B] the rows' newest tokens.
            mask: [B, 1, 1, K] additive attention mask over the K cached positions including this one.
            positions: [B, 1] the new tokens' position ids.
            cache: the engine's cache (its growing preallocated layers).

        Returns:
            logits [B, V].
        """
        batch = tokens.shape[0]
        hidden = F.embedding(tokens, self.embed)  # [B, d]
        cos, sin = self.rotary(hidden, positions)  # [B, 1, D] each
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        padded_masks: dict[int, torch.Tensor] = {}  # by buffer size: [B, 1, 1, size], the unfilled tail masked
        for index, block in enumerate(self.blocks):
            x = self._norm(hidden, block.input_norm)
            qkv = F.linear(x, block.qkv, block.qkv_bias)  # [B, (H + 2 Hkv) D]
            q = qkv[:, :q_size].view(batch, self.heads, self.head_dim)
            k = qkv[:, q_size : q_size + kv_size].view(batch, self.kv_heads, self.head_dim)
            v = qkv[:, q_size + kv_size :].view(batch, self.kv_heads, 1, self.head_dim)
            q = q * cos + _rotate_half(q) * sin
            k = (k * cos + _rotate_half(k) * sin).unsqueeze(2)
            layer = cache.layers[index]
            layer.update(k, v)
            keys, values = layer.keys, layer.values  # [B, Hkv, size, D], filled up to K
            if layer.size not in padded_masks:
                padded_masks[layer.size] = F.pad(mask, (0, layer.size - mask.shape[-1]), value=torch.finfo(mask.dtype).min)
            grouped = q.view(batch, self.kv_heads, self.heads // self.kv_heads, self.head_dim)  # [B, Hkv, G, D]
            scores = torch.matmul(grouped, keys.transpose(-1, -2)) * self.scaling + padded_masks[layer.size]  # [B, Hkv, G, size]
            weights = scores.softmax(dim=-1, dtype=torch.float32).to(values.dtype)
            attended = torch.matmul(weights, values).reshape(batch, q_size)  # [B, H D]
            hidden = hidden + F.linear(attended, block.out, block.out_bias)
            gate, up = F.linear(self._norm(hidden, block.post_norm), block.gate_up).chunk(2, dim=-1)
            hidden = hidden + F.linear(F.silu(gate) * up, block.down)
        return self.lm_head(self._norm(hidden, self.final_norm))


def _hooked(module: torch.nn.Module) -> bool:
    """Whether a forward hook (global, or on ``module`` or a submodule, or accelerate's) could change what it computes."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return True
    return any(m._forward_hooks or m._forward_pre_hooks or hasattr(m, "_hf_hook") for m in module.modules())


def _lora_linear(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a peft LoRA layer over a plain ``nn.Linear`` whose weight :func:`_weight` can merge: no
    weight merged into the base already, no DoRA magnitude, no bias of its own."""
    base = getattr(module, "base_layer", None)
    if type(base) is not torch.nn.Linear or not hasattr(module, "get_delta_weight") or getattr(module, "merged", True):
        return False
    if any(getattr(module, "use_dora", {}).values()) or any(getattr(module, "lora_bias", {}).values()):
        return False
    return all(name in module.lora_A for name in module.active_adapters)


def _plain(module: torch.nn.Module) -> torch.nn.Linear:
    """The ``nn.Linear`` itself, or the base layer of a LoRA layer."""
    return module.base_layer if _lora_linear(module) else module


def _weight(module: torch.nn.Module) -> torch.Tensor:
    """The weight [out, in] ``module`` applies: its own, or a LoRA layer's base weight plus each active adapter's
    ``(alpha / rank) B A`` (the base weight alone while its adapters are switched off)."""
    if not _lora_linear(module):
        return module.weight
    weight = module.base_layer.weight
    if module.disable_adapters:
        return weight
    return weight + sum(module.get_delta_weight(name) for name in module.active_adapters)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] along the last dimension (the rotary embedding's pairing)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
