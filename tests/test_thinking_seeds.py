"""Thinking Seeds in the loop: prefix tokens ratio against pi_b, everything else against pi_old."""

import functools
import math

import pytest
import torch

from loss_terms import policy_term
from tsctl.algo.aggregations import loss_norms
from tsctl.config.knobs import seeded_count
from tsctl.config.schema import TsctlConfig
from tsctl.engines.base import SamplingParams
from tsctl.engines.hf import HFEngine
from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.logprobs import response_logprobs
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import PLAIN, PREFIX, SUFFIX, Sample
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.base import seeds_from_table
from tsctl.seeds.generate import seed_columns
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task
from tsctl.trainer.rollout import Sampler, collect_groups


@pytest.fixture(scope="module")
def setup():
    cfg = compose_config(["model=micro", "task.train_size=200", "task.heldout_size=20", "engine.max_new_tokens=16", "ratio=50", "truncation=fixed", "seeds.fraction=0.5"]).cfg
    tok = build_char_tokenizer()
    model = build_tiny_model(cfg.model.tiny, tok, seed=0).eval()
    fmt = PromptFormatter(tok)
    task = build_task(cfg.task)
    engine = HFEngine(model, fmt.eos_id, fmt.pad_id)
    return cfg, model, fmt, task, engine


def counted(n: int, ratio: float) -> int:
    cfg = TsctlConfig()
    cfg.trainer.n, cfg.ratio = n, ratio
    return seeded_count(cfg)


def test_seeded_count_rounds_the_share_of_n():
    assert [counted(8, r) for r in (0, 25, 50, 100)] == [0, 2, 4, 8]
    assert counted(6, 25) == 2  # round(1.5) -> banker's 2
    assert counted(10, 25) == 2  # round(2.5) -> banker's 2
    assert counted(8, 5) == 0  # round(0.4): a seeded run can seed no sample


def test_prefix_ratio_is_one_when_pi_b_is_the_current_policy(setup):
    cfg, model, fmt, task, engine = setup
    problems = list(task.problems("train"))[:4]
    table = seed_columns(model, engine, fmt, task, problems, 2, cfg, checkpoint="now", checkpoint_step=0, sample_seed=3)
    groups = seeds_from_table(table)
    samples = collect_groups(Sampler(engine, fmt, task), problems, [groups[2 * i : 2 * i + 2] for i in range(4)], 4, SamplingParams(max_new_tokens=16, seed=5))
    assert sum(s.seeded for s in samples) > 0
    batch = collate(samples, torch.zeros(len(samples)), fmt.pad_id)
    with torch.no_grad():
        current, _ = response_logprobs(model, batch, cfg.engine.temperature)
    prefix = batch.source == PREFIX
    assert int(prefix.sum()) > 0
    # The seeds' stored pi_b is the current policy's own log-prob of each prefix token.
    ratio = torch.exp(current[prefix] - batch.behaviour_logprobs[prefix])
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-5)
    for s in samples:  # prefix tokens are exactly the seed's tokens
        if s.seeded:
            assert s.response_ids[: len(s.prefix_ids)] == s.prefix_ids


def test_in_a_mixed_batch_only_prefix_tokens_change_the_loss_from_dapos(setup):
    # Seeded and plain rows in one batch, pi_b (the seeds' log-probs) unlike pi_old on every prefix
    # token. The ratio denominators differ from pi_old exactly on the prefix tokens, so the loss and
    # gradient of everything but the prefix tokens are DAPO's bit for bit, and the prefix tokens'
    # are not.
    cfg, model, fmt, task, engine = setup
    problems = list(task.problems("train"))[:3]
    table = seed_columns(model, engine, fmt, task, problems, 2, cfg, checkpoint="now", checkpoint_step=0, sample_seed=3)
    groups = seeds_from_table(table)
    samples = collect_groups(Sampler(engine, fmt, task), problems, [groups[2 * i : 2 * i + 2] for i in range(3)], 4, SamplingParams(max_new_tokens=16, seed=1))
    batch = collate(samples, torch.tensor([1.0, -1.0, 0.5, -0.5] * 3), fmt.pad_id)
    prefix = batch.source == PREFIX
    rest = batch.resp_mask & ~prefix
    assert int(prefix.sum()) > 0 and bool((batch.source[rest] == PLAIN).any()) and bool((batch.source[rest] == SUFFIX).any())
    with torch.no_grad():
        pi_old = response_logprobs(model, batch)[0] - 0.05  # as if the policy had moved since sampling
    old = pi_b_on_prefix(pi_old, batch)
    assert torch.equal(old[~prefix], pi_old[~prefix])
    assert torch.equal(old[prefix], batch.behaviour_logprobs[prefix]) and bool((old[prefix] != pi_old[prefix]).all())
    loss_fn = functools.partial(policy_term, "dapo")

    def loss_and_grads(denominators, mask):
        model.zero_grad()
        lp, _ = response_logprobs(model, batch)
        token_norm, seq_norm = loss_norms(mask)
        loss, _ = loss_fn(lp, denominators, batch.advantages, mask, clip_low=0.2, clip_high=0.28, token_norm=token_norm, seq_norm=seq_norm)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    seeds_rest, seeds_rest_grads = loss_and_grads(old, rest)
    dapo_rest, dapo_rest_grads = loss_and_grads(pi_old, rest)
    assert torch.equal(seeds_rest, dapo_rest) and all(torch.equal(a, b) for a, b in zip(seeds_rest_grads, dapo_rest_grads))
    seeds_all, _ = loss_and_grads(old, batch.resp_mask)
    dapo_all, _ = loss_and_grads(pi_old, batch.resp_mask)
    assert not torch.equal(seeds_all, dapo_all)


def test_hand_computed_batch_mixing_prefix_suffix_and_plain_tokens():
    # Row 0: seeded, 2 prefix tokens + 1 suffix token, A = +1.  Row 1: plain, 2 tokens, A = -1.
    s0 = Sample(group=0, prompt_id="p", prompt_ids=[1, 5], generated_ids=[7], generated_logprobs=[-1.0], finished=True,
                prefix_ids=[5, 6], prefix_logprobs=[math.log(0.5), math.log(0.25)], behaviour_step=0)
    s1 = Sample(group=0, prompt_id="p", prompt_ids=[1, 5], generated_ids=[8, 2], generated_logprobs=[-1.0, -1.0], finished=True)
    batch = collate([s0, s1], torch.tensor([1.0, -1.0]), pad_id=0)
    assert batch.source.tolist() == [[PREFIX, PREFIX, SUFFIX], [PLAIN, PLAIN, PLAIN]]
    pi_old = torch.log(torch.tensor([[0.9, 0.9, 0.4], [0.5, 0.5, 0.0]]).clamp(min=1e-9))
    pi_theta = torch.log(torch.tensor([[0.6, 0.2, 0.5], [0.8, 0.5, 0.0]]).clamp(min=1e-9))
    old = pi_b_on_prefix(pi_old, batch)
    # ratios: prefix 0.6/0.5 = 1.2 and 0.2/0.25 = 0.8 (against pi_b, not pi_old), suffix 0.5/0.4 = 1.25,
    # plain 0.8/0.5 = 1.6 and 0.5/0.5 = 1.
    loss, metrics = policy_term("dapo", pi_theta, old, batch.advantages, batch.resp_mask, clip_low=0.2, clip_high=0.28, token_norm=5.0, seq_norm=2.0)
    ratios = metrics["ratio"][batch.resp_mask]
    assert ratios.tolist() == pytest.approx([1.2, 0.8, 1.25, 1.6, 1.0])
    # per-token losses: A=+1: -min(r, clip(r, 0.8, 1.28)) -> -1.2, -0.8, -1.25; A=-1: max(r, clip(r)) -> 1.6, 1.0
    expected = (-1.2 - 0.8 - 1.25 + 1.6 + 1.0) / 5
    assert loss.item() == pytest.approx(expected)
    assert metrics["clipped"][batch.resp_mask].tolist() == [0, 0, 0, 0, 0]


@pytest.mark.slow
def test_seed_then_rollout_then_train_chain_through_the_cli(micro, tmp_path):
    from conftest import tsctl
    from tsctl.io.shards import read_shard

    knobs = [*micro, "ratio=50", "refresh=2", "truncation=uniform", "trainer.save_rollouts=true"]
    tsctl("seed", *knobs)
    tsctl("rollout", *knobs)
    again = tsctl("seed", *knobs, check=False)
    assert again.returncode == 2 and "shards.overwrite" in again.stderr
    shards = tmp_path / "runs" / "default" / "shards"
    seeds = read_shard(shards / "seeds.parquet", "seed").table.to_pydict()
    rolled = read_shard(shards / "rollouts.parquet", "rollout").table.to_pydict()
    tsctl("train", *knobs, "name=chain")
    trained = read_shard(tmp_path / "runs" / "default" / "chain" / "rollouts" / "step-000001.parquet", "rollout").table.to_pydict()
    # Same structure as train's in-process path: n samples per prompt, k of them seeded, same columns.
    n, k = 4, 2
    assert rolled.keys() == trained.keys()
    assert len(rolled["group"]) == len(trained["group"]) == 4 * n
    for table in (rolled, trained):
        for g in range(4):
            rows = [i for i, x in enumerate(table["group"]) if x == g]
            assert len(rows) == n
            # Exactly the first k samples of a group are seeded (a seed cut at 0 too: its behaviour_step is set).
            assert [table["behaviour_step"][i] >= 0 for i in rows] == [True] * k + [False] * (n - k)
            assert all(table["prefix_len"][i] == 0 for i in rows[k:])
            assert abs(sum(table["advantage"][i] for i in rows)) < 1e-5
        assert sum(length > 0 for length in table["prefix_len"]) > 0  # some seed really has a prefix
    # The CLI rollout continues exactly the seed prefixes: prefix tokens equal the seed's tokens.
    seed_prefixes = [ids[:cut] for ids, cut in zip(seeds["response_ids"], seeds["cut"])]
    for g in range(4):
        rows = [i for i, x in enumerate(rolled["group"]) if x == g]
        for slot, i in enumerate(rows[:k]):
            prefix = seed_prefixes[g * k + slot]
            assert rolled["prefix_len"][i] == len(prefix)
            assert rolled["response_ids"][i][: len(prefix)] == prefix
            assert rolled["logprobs"][i][: len(prefix)] == pytest.approx(seeds["logprobs"][g * k + slot][: len(prefix)])
    # The stand-alone stages and train draw the same prompts for step 0.
    assert rolled["prompt_id"] == trained["prompt_id"]
