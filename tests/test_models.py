"""The built-in tokenizer and tiny model: exact round trips through save/load."""

from transformers import AutoModelForCausalLM, AutoTokenizer

import torch

from tsctl.config.schema import TinyModelConfig
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer

TEXTS = ["Use 3 5  7 2 to make 24.", "5*3=15\n15+7=22\n22+2=24\nAnswer: 24", "  leading and trailing  ", "a\n\nb {x} \\boxed{1/2}"]


def test_tokenizer_round_trips_through_save_and_load(tmp_path):
    tok = build_char_tokenizer()
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == len(text)
        assert again.encode(text, add_special_tokens=False) == ids
        assert again.decode(ids) == text
    assert (again.pad_token_id, again.bos_token_id, again.eos_token_id) == (0, 1, 2)


def test_prompt_formatter_for_a_tokenizer_without_chat_template():
    tok = build_char_tokenizer()
    fmt = PromptFormatter(tok)
    assert not fmt.chat
    assert fmt.prompt_ids("1+1") == [tok.bos_token_id] + tok.encode("1+1\n", add_special_tokens=False)
    assert fmt.response_ids("2")[-1] == tok.eos_token_id
    assert fmt.decode(fmt.response_ids("Answer: 2")) == "Answer: 2"


def test_prompt_formatter_uses_a_chat_template_when_present():
    tok = build_char_tokenizer()
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    fmt = PromptFormatter(tok)
    assert fmt.chat
    assert fmt.decode(fmt.prompt_ids("hi")) == "<user>hi>"


def test_tiny_model_saves_and_loads_with_auto_classes(tmp_path):
    tok = build_char_tokenizer()
    cfg = TinyModelConfig()
    model = build_tiny_model(cfg, tok, seed=0)
    params = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= params <= 10_000_000
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor([tok.encode("Use 3 5 to make 8.", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    again = build_tiny_model(cfg, tok, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
