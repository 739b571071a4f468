"""The learner's verbs: ``score`` writes the columns the update reads, as the parts it owns compute them; ``save`` then
``load`` give a fresh learner the optimiser, schedule, RNG and non-finite skips of the saved one."""

from __future__ import annotations

import math

import pytest
import torch

from tsctl.config.schema import TsctlConfig
from tsctl.models.batch import collate, pi_b_on_prefix
from tsctl.models.samples import PREFIX, Sample
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.trainer.learner import Learner
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.pi_old import logprob_gap
from tsctl.trainer.reference import reference_logprobs
from tsctl.trainer.update import loss_mask


class StatsEngine:
    """An engine whose token stats may stand for pi_old (``trainer.old_logprobs=auto``)."""

    reports_token_stats = True


def config(**trainer) -> TsctlConfig:
    cfg = TsctlConfig()
    cfg.engine.temperature = 1.0
    cfg.algo.kl_coef, cfg.algo.overlong = 0.1, "mask"
    cfg.trainer.mini_batches, cfg.trainer.warmup_steps = 2, 0
    for key, value in trainer.items():
        setattr(cfg.trainer, key, value)
    return cfg


def samples() -> list[Sample]:
    """A plain sample, one seeded by a known pi_b, one by a trace (pi_b unknown) cut at the length limit; every
    response token with the engine's log-prob and entropy."""
    plain = Sample(0, "p", [5, 6, 7], [20, 21, 22], [-1.0, -1.5, -0.5], True, entropies=[0.5, 0.6, 0.7])
    known = Sample(0, "p", [5, 6, 7], [23], [-0.7], True, prefix_ids=[30, 31], prefix_logprobs=[-2.0, -3.0], entropies=[0.1, 0.2, 0.3])
    trace = Sample(1, "q", [8, 9], [24, 25], [-0.2, -0.4], False, prefix_ids=[32], prefix_logprobs=[math.nan], entropies=[0.4, 0.5, 0.6])
    return [plain, known, trace]


def learner_of(cfg: TsctlConfig, engine=None, tokenizer=None) -> Learner:
    tokenizer = tokenizer or build_char_tokenizer()
    learner = Learner(cfg, Parallel(build_tiny_model(cfg.model.tiny, tokenizer, seed=0).eval()), tokenizer, engine)
    learner.reference = build_tiny_model(cfg.model.tiny, tokenizer, seed=1).eval()  # not the policy: a KL above 0
    return learner


@pytest.mark.parametrize("from_engine", [False, True])
def test_score_writes_the_columns_the_update_reads(from_engine):
    cfg = config()
    learner = learner_of(cfg, StatsEngine() if from_engine else None)
    assert learner.from_engine == from_engine
    batch = collate(samples(), torch.tensor([1.0, -1.0, 0.5]), 0)
    gap = learner.score(batch)
    old, entropy = learner.forward.recompute(learner.model, batch)
    if from_engine:  # the engine's own numbers; no gap to measure
        old, entropy = batch.engine_logprobs, batch.engine_entropy
        assert gap == {} and torch.equal(entropy[0], torch.tensor([0.5, 0.6, 0.7]))
    else:
        assert gap == logprob_gap(batch.engine_logprobs, old, batch) and gap["logprob_gap/abs_max"] > 0
    torch.testing.assert_close(batch.old_logprobs, old, rtol=0, atol=0)
    torch.testing.assert_close(batch.old_entropy, entropy, rtol=0, atol=0)
    # pi_b on the known prefix, pi_old elsewhere, the trace's token 0 (``exclude``: out of the loss mask too)
    unknown = (batch.source == PREFIX) & torch.isnan(batch.behaviour_logprobs)
    expected = torch.where(unknown, torch.zeros_like(old), pi_b_on_prefix(old, batch))
    torch.testing.assert_close(batch.denominators, expected, rtol=0, atol=0)
    assert batch.denominators[1, :2].tolist() == [-2.0, -3.0] and batch.denominators[2, 0] == 0
    ref = reference_logprobs(learner.reference, batch, learner.forward, cfg.algo.ref_placement)
    torch.testing.assert_close(batch.ref_logprobs, ref, rtol=0, atol=0)
    assert not torch.equal(batch.ref_logprobs, old)
    assert torch.equal(batch.loss_mask, loss_mask(batch, cfg))
    assert batch.loss_mask.sum() == 3 + 3  # the plain and the known rows whole; the trace row cut at the limit
    metrics = learner.update(batch, 0).means()
    assert metrics["kl_ref"] > 0 and math.isfinite(metrics["grad_norm"])


def test_a_batch_with_no_engine_entropies_scored_from_the_engine_is_refused():
    rows = samples()
    rows[0].entropies = []
    batch = collate(rows, torch.zeros(3), 0)
    assert batch.engine_entropy is None and batch.engine_logprobs[0].tolist() == [-1.0, -1.5, -0.5]
    with pytest.raises(ValueError, match="no entropies.*trainer.old_logprobs=recompute"):
        learner_of(config(), StatsEngine()).score(batch)


def test_save_then_load_restores_the_optimiser_schedule_rng_and_skips(tmp_path):
    cfg, tokenizer = config(nonfinite="skip", max_nonfinite_skips=5), build_char_tokenizer()
    saved = learner_of(cfg, tokenizer=tokenizer)
    batch = collate(samples(), torch.tensor([1.0, -1.0, 0.5]), 0)
    saved.score(batch)
    saved.update(batch, 0)
    saved.guard.skips = 3
    torch.manual_seed(7)
    path = saved.save(tmp_path, 1)
    assert path == tmp_path / "step-1"
    expected = torch.rand(3)

    loaded = learner_of(cfg, tokenizer=tokenizer)
    loaded.load(path)
    assert torch.equal(torch.rand(3), expected)  # the RNG as it was saved
    assert loaded.guard.skips == 3
    assert loaded.scheduler.state_dict() == saved.scheduler.state_dict() and loaded.scheduler.last_epoch == 2
    ours, theirs = loaded.optimizer.state_dict()["state"], saved.optimizer.state_dict()["state"]
    assert ours.keys() == theirs.keys() and len(ours) > 0
    assert all(torch.equal(ours[k]["exp_avg"], theirs[k]["exp_avg"]) for k in ours)
