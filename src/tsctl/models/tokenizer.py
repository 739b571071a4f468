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


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """A tokenizer with ids 0-3 for pad/bos/eos/unk and one id per printable ASCII character."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
