"""End tokens: one set (tokenizer EOS + generation config EOS ids + chat end-of-turn) that both engines stop on."""

from __future__ import annotations

from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from fakes.qwen import qwen_like_tokenizer, save_qwen_folder, tiny_qwen2
from tsctl.engines.base import Completion, Request, SamplingParams
from tsctl.engines.hf import HFEngine
from tsctl.models.prompts import PromptFormatter, end_token_ids
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.generate import seed_columns
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task

EOT, IM_START, IM_END = 256, 257, 258
TEXTS = ["  leading and trailing  ", "a b\n\nc  d {x} \\boxed{1/2}", "Use 3 5  7 2 to make 24.", "ünïcödé and\ttabs"]


def test_qwen_like_tokenizer_round_trips_text_and_specials_through_save_and_load(tmp_path):
    tok = qwen_like_tokenizer()
    save_qwen_folder(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        assert again.encode(text, add_special_tokens=False) == ids and again.decode(ids) == text
    assert [again.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [EOT, IM_START, IM_END]
    assert (again.eos_token_id, again.pad_token_id) == (EOT, EOT)
    prompt = PromptFormatter(again).prompt_ids("2 + 2 ?")
    assert again.decode(prompt) == "<|im_start|>user\n2 + 2 ?<|im_end|>\n<|im_start|>assistant\n"


def test_end_tokens_join_eos_generation_config_and_the_chat_end_of_turn():
    tok = qwen_like_tokenizer()
    assert end_token_ids(tok) == (EOT,)
    assert end_token_ids(tok, chat=True) == (EOT, IM_END)
    assert end_token_ids(tok, GenerationConfig(eos_token_id=[IM_END, 5]), chat=False) == (5, EOT, IM_END)
    assert end_token_ids(tok, GenerationConfig(eos_token_id=EOT), chat=True) == (EOT, IM_END)
    assert PromptFormatter(tok).end_ids == (EOT, IM_END)
    assert PromptFormatter(tok, use_chat_template=False).end_ids == (EOT,)


def test_templates_without_a_special_end_of_turn_add_nothing():
    tok = build_char_tokenizer()  # the built-in model: the default run stops on its EOS alone
    assert PromptFormatter(tok, use_chat_template=False).end_ids == (tok.eos_token_id,)
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    assert PromptFormatter(tok).chat and PromptFormatter(tok).end_ids == (tok.eos_token_id,)
    tok.chat_template = "{{ raise_exception('no assistant turns') }}"
    assert end_token_ids(tok, chat=True) == (tok.eos_token_id,)


def test_a_loaded_qwen_folder_stops_at_im_end_although_its_generation_config_names_eos_only(tmp_path):
    save_qwen_folder(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert model.generation_config.eos_token_id == EOT
    assert PromptFormatter(AutoTokenizer.from_pretrained(tmp_path), True, model.generation_config).end_ids == (EOT, IM_END)


def test_hf_engine_stops_at_whichever_end_token_comes_first():
    model = tiny_qwen2(qwen_like_tokenizer(), seed=3)
    prompt, params = [IM_START, 117, 115, 101, 114, 10, 65], SamplingParams(temperature=3.0, max_new_tokens=12, seed=1)
    free = HFEngine(model, -1, EOT).generate([Request(prompt)], params)[0].token_ids
    firsts = [i for i, t in enumerate(free) if i > 0 and t not in free[:i]]  # positions of a token's first draw
    early, late = firsts[0], firsts[1]
    never = next(t for t in range(256) if t not in free)
    both = HFEngine(model, (never, free[late], free[early]), EOT).generate([Request(prompt)], params)[0]
    assert both.finished and both.token_ids == free[: early + 1]
    one = HFEngine(model, (never, free[late]), EOT).generate([Request(prompt)], params)[0]
    assert one.finished and one.token_ids == free[: late + 1]
    assert not HFEngine(model, never, EOT).generate([Request(prompt)], params)[0].finished
    assert HFEngine(model, [free[late], never, free[late]], EOT).end_ids == tuple(sorted({never, free[late]}))


class ScriptedEngine:
    """Returns fixed completions: one that ends with <|im_end|>, one cut at its limit."""

    reports_token_stats = False

    def generate(self, requests, params):
        texts = [[65, 66, 67, IM_END], [68, 69, 70, 71]]
        return [Completion(texts[i % 2], [-0.5] * 4, finished=i % 2 == 0) for i in range(len(requests))]


def test_a_seed_prefix_never_takes_the_end_token_that_closed_a_chat_turn():
    tok = qwen_like_tokenizer()
    model = tiny_qwen2(tok)
    cfg = compose_config(["truncation=fixed", "seeds.fraction=1.0", "task=arithmetic", "task.train_size=50", "task.heldout_size=5"]).cfg
    task = build_task(cfg.task)
    columns = seed_columns(
        model, ScriptedEngine(), PromptFormatter(tok), task, list(task.problems("train"))[:1], 2, cfg,
        checkpoint="now", checkpoint_step=0, sample_seed=0,
    )
    assert columns["finished"] == [True, False]
    assert columns["cut"] == [3, 4]  # the whole response but its <|im_end|>; all of the unfinished one
