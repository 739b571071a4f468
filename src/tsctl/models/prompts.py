"""Turn problems into prompt token ids and worked solutions into response token ids.

Models whose tokenizer has a chat template see the question as a user turn; others (the built-in
model) see ``<bos>question\\n``. Responses end with EOS.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


class PromptFormatter:
    """Encodes questions and responses for one tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, use_chat_template: bool = True) -> None:
        self.tokenizer = tokenizer
        self.chat = bool(use_chat_template and getattr(tokenizer, "chat_template", None))
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; set tokenizer.eos_token before training")
        self.eos_id: int = tokenizer.eos_token_id
        self.pad_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id

    def prompt_ids(self, question: str) -> list[int]:
        """Token ids of the prompt for ``question``, ending where the response starts."""
        if self.chat:
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True
            )
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        bos = [self.tokenizer.bos_token_id] if self.tokenizer.bos_token_id is not None else []
        return bos + self.tokenizer.encode(question + "\n", add_special_tokens=False)

    def response_ids(self, text: str) -> list[int]:
        """Token ids of a response text followed by EOS (the warm-up target)."""
        return self.tokenizer.encode(text, add_special_tokens=False) + [self.eos_id]

    def decode(self, ids: list[int]) -> str:
        """Response text of ``ids`` without special tokens."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)
