"""The built-in tiny model: a standard transformers Llama causal LM of about 1-2 M parameters."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from tsctl.config.schema import TinyModelConfig


def build_tiny_model(cfg: TinyModelConfig, tokenizer: PreTrainedTokenizerBase, seed: int) -> LlamaForCausalLM:
    """A freshly initialised fp32 Llama model sized by ``cfg`` for ``tokenizer``'s vocabulary."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).float()
