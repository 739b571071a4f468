"""pi_old from the engine against a recompute: same log-probs and entropies, and when each is used."""

import pytest
import torch

from tsctl.config.errors import ConfigError
from tsctl.engines.base import SamplingParams
from tsctl.engines.hf import HFEngine
from tsctl.engines.own_logprobs import uses_engine_logprobs
from tsctl.models.batch import collate
from tsctl.models.forward import Forward
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import PREFIX
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.base import seeds_from_table
from tsctl.seeds.generate import seed_columns
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task
from tsctl.trainer import pi_old
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.rollout import Sampler, collect_groups

OVERRIDES = ["model=micro", "task.train_size=200", "task.heldout_size=20", "engine.max_new_tokens=16", "ratio=50", "truncation=fixed", "seeds.fraction=0.5"]


@pytest.fixture(scope="module")
def setup():
    cfg = compose_config(OVERRIDES).cfg
    tok = build_char_tokenizer()
    model = build_tiny_model(cfg.model.tiny, tok, seed=0).eval()
    fmt = PromptFormatter(tok)
    return cfg, model, fmt, build_task(cfg.task), HFEngine(model, fmt.eos_id, fmt.pad_id)


def mixed_samples(setup, temperature: float):
    """4 prompts x 4 samples, 2 per group continuing seeds written by the same model."""
    cfg, model, fmt, task, engine = setup
    problems = list(task.problems("train"))[:4]
    seeds = seeds_from_table(seed_columns(model, engine, fmt, task, problems, 2, cfg, checkpoint="now", checkpoint_step=0, sample_seed=3))
    params = SamplingParams(temperature=temperature, max_new_tokens=16, seed=5)
    return collect_groups(Sampler(engine, fmt, task), problems, [seeds[2 * i : 2 * i + 2] for i in range(4)], 4, params)


@pytest.mark.parametrize("temperature", [0.6, 1.0, 0.0])
def test_engine_log_probs_and_entropies_equal_a_recompute(setup, temperature):
    cfg, model, fmt, *_ = setup
    samples = mixed_samples(setup, temperature)
    assert any(s.seeded for s in samples) and any(not s.seeded for s in samples)
    batch = collate(samples, torch.zeros(len(samples)), fmt.pad_id)
    logprobs, entropy = batch.engine_logprobs, batch.engine_entropy  # as collate packs what the engine reported
    expected_lp, expected_ent = Forward(temperature or 1.0, micro_batch_size=5).recompute(model, batch)
    generated = batch.resp_mask & (batch.source != PREFIX)
    torch.testing.assert_close(logprobs[generated], expected_lp[generated], atol=1e-4, rtol=0)
    # Entropies at every response token, prefix tokens included (those come from the engine's prefill).
    torch.testing.assert_close(entropy[batch.resp_mask], expected_ent[batch.resp_mask], atol=1e-4, rtol=0)
    assert (logprobs[batch.source == PREFIX] == 0).all() and (entropy[~batch.resp_mask] == 0).all()


def test_micro_batched_recompute_equals_the_whole_batch(setup):
    *_, fmt, _, _ = setup
    samples = mixed_samples(setup, 0.6)
    batch = collate(samples, torch.zeros(len(samples)), fmt.pad_id)
    whole = Forward(0.6).recompute(setup[1], batch)
    split = Forward(0.6, micro_batch_size=3).recompute(setup[1], batch)
    for a, b in zip(whole, split):
        torch.testing.assert_close(a * batch.resp_mask, b * batch.resp_mask, atol=1e-5, rtol=0)


def test_seed_log_probs_from_the_engine_equal_teacher_forcing(setup):
    cfg, model, fmt, task, engine = setup
    problems = list(task.problems("train"))[:3]
    args = (model, engine, fmt, task, problems, 2)
    kwargs = {"checkpoint": "now", "checkpoint_step": 0, "sample_seed": 4}
    from_engine = seed_columns(*args, cfg, **kwargs)
    recompute = compose_config([*OVERRIDES, "trainer.old_logprobs=recompute"]).cfg
    teacher = seed_columns(*args, recompute, **kwargs)
    assert from_engine["response_ids"] == teacher["response_ids"] and from_engine["cut"] == teacher["cut"]
    for column in ("logprobs", "entropies"):
        for a, b in zip(from_engine[column], teacher[column]):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)


class NoStatsEngine:
    reports_token_stats = False


def test_auto_uses_the_engine_only_where_it_matches_the_trainer(setup):
    cfg, model, _, _, engine = setup
    assert uses_engine_logprobs(cfg, engine, model)
    assert not uses_engine_logprobs(cfg, NoStatsEngine(), model)
    nucleus = compose_config([*OVERRIDES, "engine.top_p=0.9"]).cfg
    assert not uses_engine_logprobs(nucleus, engine, model)
    assert not uses_engine_logprobs(cfg, engine, build_tiny_model(cfg.model.tiny, build_char_tokenizer(), seed=0).to(torch.bfloat16))
    recompute = compose_config([*OVERRIDES, "trainer.old_logprobs=recompute"]).cfg
    assert not uses_engine_logprobs(recompute, engine, model)


@pytest.mark.parametrize("override", ["engine=vllm", "engine.top_p=0.9"])
def test_engine_log_probs_are_refused_where_they_would_differ(override):
    with pytest.raises(ConfigError, match="trainer.old_logprobs"):
        compose_config(["trainer.old_logprobs=engine", override])


def test_samples_without_entropies_get_a_clear_error(setup):
    cfg, model, fmt, *_ = setup
    samples = mixed_samples(setup, 0.6)
    samples[0].entropies = []
    batch = collate(samples, torch.zeros(len(samples)), fmt.pad_id)
    assert batch.engine_entropy is None
    with pytest.raises(ValueError, match="old_logprobs=recompute"):
        pi_old.step_pi_old(cfg, batch, Parallel(model), Forward(), from_engine=True)
