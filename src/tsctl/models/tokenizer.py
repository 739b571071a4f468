"""The built-in character-level tokenizer: one token per printable ASCII character.

Character tokens keep digits and operators as separate symbols (what the synthetic tasks need) and
make every text round-trip exactly through ``save_pretrained`` / ``AutoTokenizer.from_pretrained``:
a ``Fuse`` decoder joins tokens without inserting or dropping spaces.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
CHARACTERS = tuple(c for c in string.printable if c not in "\t\r\x0b\x0c")


def build_char_tokenizer(vocab_size: int | None = None) -> PreTrainedTokenizerFast:
    """A tokenizer with ids 0-3 for pad/bos/eos/unk and one id per printable ASCII character.

    ``vocab_size`` pads the vocabulary with filler tokens ``<t{id}>`` up to that size: text never
    encodes to them, but every id decodes (what a random-init model of a real vocabulary size needs).
    """
    tokens = SPECIAL_TOKENS + CHARACTERS
    if vocab_size is not None:
        if vocab_size < len(tokens):
            raise ValueError(f"vocab_size must be at least {len(tokens)}, got {vocab_size}")
        tokens += tuple(f"<t{i}>" for i in range(len(tokens), vocab_size))
    vocab = {token: i for i, token in enumerate(tokens)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
