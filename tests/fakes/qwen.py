"""A Qwen2-style chat tokenizer and a tiny random Qwen2 model, built locally (no hub).

The tokenizer is byte-level BPE without merges (one token per byte, so any text round-trips), with
Qwen's special tokens and chat template: ``<|endoftext|>`` is EOS and padding, chat turns end with
``<|im_end|>``, and the generation config lists ``<|endoftext|>`` only, as in Qwen2.5-Math's base
model folders. ``<|im_end|>`` ends a sample only because the chat template says so.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def qwen_like_tokenizer() -> PreTrainedTokenizerFast:
    """256 byte tokens (ids 0-255), then ``<|endoftext|>`` 256, ``<|im_start|>`` 257, ``<|im_end|>`` 258."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def tiny_qwen2(tokenizer: PreTrainedTokenizerFast, seed: int = 0, tie: bool = True, head_dim: int = 8) -> Qwen2ForCausalLM:
    """A random two-layer Qwen2 (float32, eager attention; 4 query and 2 key-value heads of ``head_dim``) whose
    vocabulary covers ``tokenizer``. vLLM's CPU attention takes ``head_dim`` 32 and up."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=4 * head_dim, intermediate_size=8 * head_dim, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=tie,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    config._attn_implementation = "eager"
    model = Qwen2ForCausalLM(config).eval()
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return model


def save_qwen_folder(path: Path, seed: int = 0, tie: bool = True, head_dim: int = 8) -> Path:
    """Write a tiny Qwen2 model folder (weights, config, generation config, tokenizer) to ``path``."""
    tokenizer = qwen_like_tokenizer()
    tiny_qwen2(tokenizer, seed=seed, tie=tie, head_dim=head_dim).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
