"""Turn problems into prompt token ids and worked solutions into response token ids.

Models whose tokenizer has a chat template see the question as a user turn; others (the built-in
model) see ``<bos>question\\n``. Responses end with EOS.

A sample ends at any of its **end tokens** (:func:`end_token_ids`): the tokenizer's EOS, the
generation config's EOS ids and, when prompts use the chat template, the template's end-of-turn
token (``<|im_end|>`` for Qwen). Every engine stops on exactly this set.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from transformers import PreTrainedTokenizerBase

_PROBE = "tsctl-end-of-turn-probe"
"""Assistant text rendered through the chat template to find the token that follows a turn."""


def _chat_end_of_turn(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The special token the chat template writes right after an assistant turn, or None.

    Renders ``[user, assistant=_PROBE]`` as text and encodes what follows the probe: its first token
    counts when it is a special token (``<|im_end|>`` for Qwen, ``<|eot_id|>`` for Llama 3, the EOS
    for templates that end turns with it). Templates that render no assistant turn give None.
    """
    messages = [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": _PROBE}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render this turn has no end-of-turn token to find
        return None
    if not isinstance(text, str) or _PROBE not in text:
        return None
    after = tokenizer.encode(text[text.rindex(_PROBE) + len(_PROBE) :], add_special_tokens=False)
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    return after[0] if after and after[0] in special else None


def end_token_ids(tokenizer: PreTrainedTokenizerBase, generation_config: Any = None, chat: bool = False) -> tuple[int, ...]:
    """Sorted ids of every token that ends a sample.

    Args:
        tokenizer: its ``eos_token_id`` always ends a sample.
        generation_config: a ``transformers.GenerationConfig`` (or None); its ``eos_token_id`` (an int
            or a list) ends a sample too.
        chat: prompts use the chat template, so its end-of-turn token ends a sample.
    """
    ends = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    extra = getattr(generation_config, "eos_token_id", None)
    ends |= set(extra) if isinstance(extra, (list, tuple)) else ({extra} if extra is not None else set())
    if chat and (turn := _chat_end_of_turn(tokenizer)) is not None:
        ends.add(turn)
    return tuple(sorted(int(i) for i in ends))


class PromptFormatter:
    """Encodes questions and responses for one tokenizer.

    Args:
        tokenizer: the model's tokenizer (must have an EOS token).
        use_chat_template: wrap questions in the tokenizer's chat template when it has one.
        generation_config: the model's ``generation_config``; its EOS ids join :attr:`end_ids`.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, use_chat_template: bool = True, generation_config: Any = None) -> None:
        self.tokenizer = tokenizer
        self.chat = bool(use_chat_template and getattr(tokenizer, "chat_template", None))
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; set tokenizer.eos_token before training")
        self.eos_id: int = tokenizer.eos_token_id
        self.pad_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.end_ids: tuple[int, ...] = end_token_ids(tokenizer, generation_config, self.chat)
        """Every token that ends a sample (see :func:`end_token_ids`); includes ``eos_id``."""

    def prompt_ids(self, question: str) -> list[int]:
        """Token ids of the prompt for ``question``, ending where the response starts."""
        if self.chat:
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True
            )
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        bos = [self.tokenizer.bos_token_id] if self.tokenizer.bos_token_id is not None else []
        return bos + self.tokenizer.encode(question + "\n", add_special_tokens=False)

    @cached_property
    def most_chars_per_token(self) -> int:
        """The longest entry of the vocabulary, in characters: the most text one token stands for (a byte-level entry's
        symbols are bytes, at least one per character), so that a text is at least ``len(text) / most_chars_per_token``
        tokens, known without tokenizing it."""
        return max((len(token) for token in self.tokenizer.get_vocab()), default=1)

    def response_ids(self, text: str) -> list[int]:
        """Token ids of a response text followed by EOS (the warm-up target)."""
        return self.tokenizer.encode(text, add_special_tokens=False) + [self.eos_id]

    def decode(self, ids: list[int]) -> str:
        """Response text of ``ids`` without special tokens."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)
