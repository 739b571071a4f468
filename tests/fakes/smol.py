"""A small model folder of a real architecture, as a researcher's own pretrained model would be laid out, built locally.

The tokenizer is a real byte-level BPE (GPT-2's pre-tokenizer and decoder, as SmolLM's), trained here with merges on a
few hundred grade-school math sentences, with ChatML's special tokens and chat template (``<|im_end|>`` is EOS and
ends a turn, as in SmolLM2-Instruct). The model is a random Llama of SmolLM2's layout (tied embeddings, grouped
key-value heads) shrunk to two layers and head size 32 (vLLM's CPU attention's smallest), with SmolLM2's context
of 8192 positions, so nothing here is sized for a test's prompts.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CONTEXT = 8192
"""SmolLM2's ``max_position_embeddings``."""

WORDS = (
    "Janet has 16 eggs and eats 3 of them for breakfast every morning. She sells the remainder at the market for $2 each. "
    "How much money does she make every day? A robe takes 2 bolts of blue fiber and half that much white fiber. "
    "Please reason step by step, and put your final answer within \\boxed{}. The answer is 18. Answer: 42 #### 7"
)


def train_tokenizer(vocab_size: int = 600) -> PreTrainedTokenizerFast:
    """A byte-level BPE with merges learnt from :data:`WORDS` (any text still encodes: every byte is a token)."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    core.train_from_iterator([WORDS] * 50, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|im_end|>", bos_token="<|im_start|>",
        chat_template=CHAT_TEMPLATE, clean_up_tokenization_spaces=False,
    )


def smol_llama(tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> LlamaForCausalLM:
    """A random two-layer Llama of SmolLM2's layout (head size 32, 2 query and 1 key-value heads) over ``tokenizer``'s vocabulary."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=CONTEXT, rope_theta=100000.0, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    return model


def save_smol_folder(path: Path, seed: int = 0) -> Path:
    """Write the model folder (weights, config, generation config, tokenizer) to ``path``."""
    tokenizer = train_tokenizer()
    smol_llama(tokenizer, seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
