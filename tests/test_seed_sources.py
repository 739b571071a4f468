"""Seeds from another model (pi_b = its teacher-forced log-probs) and from a trace file (the documented ratio rule)."""

import dataclasses
import functools
import json
import math

import pytest
import torch
from typer.testing import CliRunner

from conftest import micro_args
from tsctl.cli import app
from loss_terms import policy_term
from tsctl.algo.aggregations import loss_norms
from tsctl.algo.losses import dual_clip_bounds
from tsctl.config.errors import ConfigError
from tsctl.models.batch import collate
from tsctl.models.forward import Forward
from tsctl.models.logprobs import response_logprobs
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import PREFIX, Sample
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.base import seeds_from_table
from tsctl.seeds.sources import ModelSource, TraceSource, check_tokenizer
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task
from tsctl.trainer.denominators import ratio_denominators
from tsctl.trainer.update import loss_mask

BASE = ["model=micro", "task=arithmetic", "task.train_size=200", "task.heldout_size=20", "engine.max_new_tokens=16", "ratio=50", "truncation=fixed", "seeds.fraction=0.5"]


@pytest.fixture(scope="module")
def policy():
    cfg = compose_config(BASE).cfg
    tok = build_char_tokenizer()
    return cfg, build_tiny_model(cfg.model.tiny, tok, seed=0).eval(), PromptFormatter(tok), build_task(cfg.task)


@pytest.fixture(scope="module")
def other_model(tmp_path_factory, policy):
    """A second tiny model, another size and initialisation, with the built-in tokenizer."""
    cfg, *_ = policy
    tok = build_char_tokenizer()
    tiny = type(cfg.model.tiny)(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    folder = tmp_path_factory.mktemp("other")
    build_tiny_model(tiny, tok, seed=11).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_another_models_seed_has_its_teacher_forced_log_probs_as_pi_b(policy, other_model):
    _, model, fmt, task = policy
    cfg = compose_config([*BASE, "seeds.source=model", f"seeds.source_path={other_model}", "engine.temperature=0.7"]).cfg
    source = ModelSource(cfg, fmt, task)
    sample = source.engine.generate
    source.engine.generate = lambda requests, params: [  # the sampler's own log-probs are never pi_b here
        dataclasses.replace(c, logprobs=[0.0] * len(c.logprobs)) for c in sample(requests, params)
    ]
    problems = list(task.problems("train"))[:3]
    cols = source.columns(problems, 2, first=4, serve_steps=[4, 4, 5], sample_seed=9)
    assert cols["checkpoint"] == [f"model:{other_model}"] * 6 and cols["checkpoint_step"] == [4] * 6
    assert sum(len(r) for r in cols["response_ids"]) > 6
    for prompt, response, logprobs in zip(cols["prompt_ids"], cols["response_ids"], cols["logprobs"]):
        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            expected = torch.log_softmax(source.model(ids).logits[0, len(prompt) - 1 : -1] / 0.7, -1)
            mine = torch.log_softmax(model(ids).logits[0, len(prompt) - 1 : -1] / 0.7, -1)
        target = torch.tensor(response).unsqueeze(1)
        torch.testing.assert_close(torch.tensor(logprobs), expected.gather(1, target)[:, 0], atol=1e-5, rtol=0)
        assert not torch.allclose(torch.tensor(logprobs), mine.gather(1, target)[:, 0], atol=1e-2)  # not the policy's


def test_a_mismatched_tokenizer_is_refused_in_one_line(policy, tmp_path):
    _, _, fmt, _ = policy
    extra = build_char_tokenizer()
    extra.add_tokens(["<step>"])
    with pytest.raises(ConfigError) as err:
        check_tokenizer(fmt.tokenizer, extra, "other/model")
    text = str(err.value)
    assert "\n" not in text and "seeds.source_path" in text and "other/model" in text and "'<step>' -> 100" in text
    other_eos = build_char_tokenizer()
    other_eos.eos_token = "<bos>"
    with pytest.raises(ConfigError, match="ends responses with token 1, the policy with 2"):
        check_tokenizer(fmt.tokenizer, other_eos, "m")
    check_tokenizer(fmt.tokenizer, build_char_tokenizer(), "same")  # the same tokenizer passes


def write_traces(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_trace_seeds_rotate_over_a_prompts_traces_and_have_unknown_pi_b(policy, tmp_path):
    _, _, fmt, task = policy
    problems = list(task.problems("train"))[:3]
    traces = write_traces(tmp_path / "t.jsonl", [
        {"prompt_id": problems[0].id, "response": "ab"},
        {"prompt_id": problems[0].id, "response": "cde"},
        {"question": problems[1].question, "response": "x" * 40},  # longer than max_new_tokens=16
    ])
    cfg = compose_config([*BASE, "seeds.source=traces", f"seeds.source_path={traces}"]).cfg
    cols = TraceSource(cfg, fmt, task).columns(problems, 3, first=2, serve_steps=[2, 3, 3], sample_seed=1)
    enc = lambda text: fmt.tokenizer.encode(text, add_special_tokens=False) + [fmt.eos_id]
    # prompt 0 served at step 2 with k = 3: traces (2*3 + j) mod 2 = 0, 1, 0
    assert cols["response_ids"][:3] == [enc("ab"), enc("cde"), enc("ab")]
    assert cols["response_ids"][3] == enc("x" * 40)[:16] and cols["finished"][3:6] == [False] * 3
    assert cols["response_ids"][6:] == [[]] * 3 and cols["checkpoint"][6:] == [""] * 3  # no trace: no seed
    assert cols["checkpoint"][:6] == [f"traces:{traces}"] * 6 and cols["checkpoint_step"] == [2] * 9
    assert all(math.isnan(x) for row in cols["logprobs"] + cols["entropies"] for x in row)
    assert cols["cut"][:3] == [1, 2, 1] and cols["cut"][3] == 8  # fixed 0.5 of the tokens before EOS
    assert cols["prompt_ids"][0] == fmt.prompt_ids(problems[0].question)


def trace_batch(policy):
    """One trace-seeded sample (pi_b unknown), one seeded by a known pi_b, one plain; advantages -1, 1, 0."""
    _, model, fmt, task = policy
    prompt = fmt.prompt_ids(list(task.problems("train"))[0].question)
    trace = Sample(0, "p", prompt, [20, 21], [-1.0, -1.2], True, prefix_ids=[30, 31, 32], prefix_logprobs=[math.nan] * 3, behaviour_checkpoint="traces:t", behaviour_step=0)
    known = Sample(0, "p", prompt, [22], [-0.7], True, prefix_ids=[33, 34], prefix_logprobs=[-2.0, -3.0], behaviour_checkpoint="step-0", behaviour_step=0)
    plain = Sample(0, "p", prompt, [23, 24, 25], [-0.5, -0.6, -0.4], True)
    samples = [trace, known, plain]
    return samples, collate(samples, torch.tensor([-1.0, 1.0, 0.0]), fmt.pad_id)


def test_trace_prefix_excluded_from_the_loss(policy):
    cfg, model, *_ = policy
    samples, batch = trace_batch(policy)
    old, _ = Forward(0.6).recompute(model, batch)
    denominators, mask = ratio_denominators(old, batch, cfg), loss_mask(batch, cfg)
    unknown = torch.zeros_like(batch.resp_mask)
    unknown[0, :3] = True
    assert torch.equal(mask, batch.resp_mask & ~unknown)
    assert torch.isfinite(denominators).all() and (denominators[unknown] == 0).all()
    assert denominators[1, :2].tolist() == [-2.0, -3.0]  # a known pi_b stays the denominator
    assert torch.equal(denominators[~unknown & batch.resp_mask & (batch.source != PREFIX)], old[~unknown & batch.resp_mask & (batch.source != PREFIX)])


@pytest.mark.parametrize("engine_old", [False, True])
def test_trace_prefix_capped_ratio_starts_at_one_and_the_dual_clip_bounds_it(policy, engine_old):
    _, model, fmt, _ = policy
    cfg = compose_config([*BASE, "seeds.trace_logprobs=cap"]).cfg
    samples, batch = trace_batch(policy)
    if engine_old:  # the engine's pi_old has no prefix log-probs: the trace's are recomputed
        old = batch.engine_logprobs  # as collate packs the engine's log-probs: 0 on prefix tokens
    else:
        old = Forward(0.6).recompute(model, batch)[0]
    recompute = (lambda rows: Forward.of(cfg).recompute(model, rows, entropy=False)[0]) if engine_old else None
    denominators, mask = ratio_denominators(old, batch, cfg, recompute), loss_mask(batch, cfg)
    assert torch.equal(mask, batch.resp_mask)
    with torch.no_grad():
        now = response_logprobs(model, batch, 0.6)[0]
    ratio = (now - denominators).exp()
    torch.testing.assert_close(ratio[0, :3], torch.ones(3), atol=1e-5, rtol=0)  # pi_b := pi_old: r = 1 at the first update
    assert denominators[1, :2].tolist() == [-2.0, -3.0]
    # pi_theta far above pi_old on the trace tokens, advantage -1: each token's loss is capped at -A * c = 3.
    loss_fn = functools.partial(policy_term, "dapo")
    lifted = denominators + torch.where(batch.source == PREFIX, 4.0, 0.0) * torch.tensor([[1.0], [0.0], [0.0]])
    token_norm, seq_norm = loss_norms(mask)
    _, metrics = loss_fn(lifted, denominators, batch.advantages, mask, clip_low=0.2, clip_high=0.28,
                         clip_c=dual_clip_bounds(batch.source == PREFIX, None, 3.0), token_norm=token_norm, seq_norm=seq_norm)
    torch.testing.assert_close(metrics["pg_loss"][0, :3], torch.full((3,), 3.0))
    assert (metrics["clip_dual"][0, :3] == 1).all()


def test_without_trace_seeds_the_inputs_pass_unchanged(policy):
    cfg, model, *_ = policy
    samples, batch = trace_batch(policy)
    keep = [1, 2]
    batch = collate([samples[i] for i in keep], torch.tensor([1.0, 0.0]), policy[2].pad_id)
    old = Forward(0.6).recompute(model, batch)[0]
    denominators = ratio_denominators(old, batch, cfg)
    assert torch.equal(loss_mask(batch, cfg), batch.resp_mask)
    assert torch.equal(denominators, torch.where(batch.source == PREFIX, batch.behaviour_logprobs, old))


def test_missing_traces_give_plain_samples_through_the_seed_table(policy, tmp_path):
    _, _, fmt, task = policy
    problems = list(task.problems("train"))[:2]
    traces = write_traces(tmp_path / "t.jsonl", [{"prompt_id": problems[0].id, "response": "12"}])
    cfg = compose_config([*BASE, "seeds.source=traces", f"seeds.source_path={traces}"]).cfg
    seeds = seeds_from_table(TraceSource(cfg, fmt, task).columns(problems, 2, 0, [0, 0], 0))
    assert [bool(s.checkpoint) for s in seeds] == [True, True, False, False]  # SeedBank.for_step drops the last two


def test_traces_that_match_no_prompt_are_refused_and_partial_cover_is_counted(policy, tmp_path):
    _, _, fmt, task = policy
    problems = list(task.problems("train"))[:4]
    cfg = lambda traces: compose_config([*BASE, "seeds.source=traces", f"seeds.source_path={traces}"]).cfg
    none = write_traces(tmp_path / "none.jsonl", [{"prompt_id": "no-such-id", "response": "12"}, {"question": "1+1=?", "response": "2"}])
    with pytest.raises(ConfigError, match=r"'seeds.source_path'.*no trace .* any of the 4 train prompts .*'no-such-id'"):
        TraceSource(cfg(none), fmt, task).coverage(problems)
    some = write_traces(tmp_path / "some.jsonl", [{"prompt_id": problems[0].id, "response": "12"}, {"question": problems[2].question, "response": "3"}])
    assert TraceSource(cfg(some), fmt, task).coverage(problems) == (
        "seeds.source_path: traces cover 2 of the 4 train prompts; the other 2 get no seeds (their samples are plain)"
    )
    every = write_traces(tmp_path / "all.jsonl", [{"prompt_id": p.id, "response": "1"} for p in problems])
    assert TraceSource(cfg(every), fmt, task).coverage(problems) is None


def test_a_trace_file_that_covers_some_prompts_says_how_many_before_the_first_step(tmp_path, model_cache):
    traces = tmp_path / "some.jsonl"
    args = [*micro_args(tmp_path / "runs", model_cache), "ratio=50", "trainer.steps=1", "seeds.source=traces", f"seeds.source_path={traces}"]
    problems = build_task(compose_config(args[:-2]).cfg.task).problems("train")
    write_traces(traces, [{"prompt_id": p.id, "response": p.answer} for p in problems[:3]])
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 0, result.output
    note = (f"note: seeds.source_path: traces cover 3 of the {len(problems)} train prompts; "
            f"the other {len(problems) - 3} get no seeds (their samples are plain)")
    lines = result.output.splitlines()
    assert note in lines and lines.index(note) < next(i for i, line in enumerate(lines) if line.startswith("run complete"))
