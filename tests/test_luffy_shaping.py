"""LUFFY's policy shaping of trace tokens (``seeds.trace_logprobs=shaping``, Yan et al., arXiv 2504.14945): the paper's
``f(pi_theta) = pi_theta / (pi_theta + gamma)`` in place of the ratio of each trace token, unclipped, hand-computed with
its gradient; what the objective and the denominators make of it; refusals; a micro train with trace seeds."""

import json
import math

import pytest
import torch

from tsctl.algo.aggregations import loss_norms
from tsctl.algo.luffy_shaping import luffy_shaping
from tsctl.algo.objective import Objective, Tokens
from tsctl.config.errors import ConfigError
from tsctl.config.schema import AlgoConfig
from tsctl.models.batch import collate
from tsctl.models.samples import Sample
from tsctl.runconfig import compose_config
from tsctl.trainer.denominators import ratio_denominators, shaping_gamma
from tsctl.trainer.update import loss_mask

LOG = math.log


def test_hand_computed_shaped_loss_and_gradient():
    # f(pi) = pi / (pi + 0.1); d f / d log pi = pi * 0.1 / (pi + 0.1)^2. A = 2, loss -A f:
    #   pi = 0.5: f = 0.5 / 0.6 = 5/6,   d f / d log pi = 0.05 / 0.36 = 5/36
    #   pi = 0.1: f = 0.1 / 0.2 = 1/2,   d f / d log pi = 0.01 / 0.04 = 1/4
    #   pi = 0.9: f = 0.9 / 1.0 = 0.9,   d f / d log pi = 0.09 / 1.00 = 0.09
    logprobs = torch.tensor([[LOG(0.5), LOG(0.1), LOG(0.9)]], dtype=torch.float64, requires_grad=True)
    loss, m = luffy_shaping(logprobs, torch.tensor([2.0], dtype=torch.float64), gamma=0.1)
    torch.testing.assert_close(loss.detach(), torch.tensor([[-2 * 5 / 6, -2 * 0.5, -2 * 0.9]], dtype=torch.float64))
    loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2 * 5 / 36, -2 * 0.25, -2 * 0.09]], dtype=torch.float64))
    torch.testing.assert_close(m["ratio"], torch.tensor([[0.5, 0.1, 0.9]]))  # the ratio against pi_b := 1 is pi itself
    assert all(m[k].sum() == 0 for k in ("clip_low", "clip_high", "clip_dual", "clipped", "kl_k3"))
    # Against the unshaped pi / 1 (weight pi on grad log pi), the weight is scaled by gamma / (pi + gamma)^2:
    # 0.1 / 0.36 = 0.278, 0.1 / 0.04 = 2.5, 0.1 / 1 = 0.1: the least likely trace token is amplified, the likeliest damped.
    scale = logprobs.grad[0] / (-2 * torch.tensor([0.5, 0.1, 0.9], dtype=torch.float64))
    torch.testing.assert_close(scale, torch.tensor([0.1 / 0.36, 2.5, 0.1], dtype=torch.float64))


def hand_tokens(shaped=True):
    """3x3. Row 0 (A = +1): two trace tokens (pi 0.5, 0.1; denominator log 1 = 0), a suffix token of ratio 2.
    Row 1 (A = -1): plain, ratios 1, 0.5, 1. Row 2 (A = -1): a trace token (pi 0.5), a suffix token of ratio 1, padding."""
    old = torch.tensor([[0.0, 0.0, -1.0], [-1.0, -1.0, -1.0], [0.0, -1.0, -1.0]])
    logprobs = torch.tensor([[LOG(0.5), LOG(0.1), -1 + LOG(2)], [-1.0, -1 + LOG(0.5), -1.0], [LOG(0.5), -1.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    trace = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    return Tokens(logprobs, old, torch.tensor([1.0, -1.0, -1.0]), mask, trace, shaped=trace if shaped else None)


def test_the_objective_shapes_the_trace_tokens_and_leaves_the_others_to_the_policy_loss():
    # Per token (vanilla, clip 0.2 / 0.28), loss and d loss / d log pi before the token-mean over 8 loss tokens:
    #   row 0, A = +1: trace 0.5: -5/6, -5/36; trace 0.1: -1/2, -1/4; suffix r = 2 > 1.28: -1.28, 0 (clip_high)
    #   row 1, A = -1: r = 1: 1, 1; r = 0.5 < 0.8: max(0.5, 0.8) = 0.8, 0 (clip_low); r = 1: 1, 1
    #   row 2, A = -1: trace 0.5: +5/6, +5/36 (no clip: PPO's clip_low would zero it at r = 0.5); suffix r = 1: 1, 1
    # sum = -5/6 - 1/2 - 1.28 + 1 + 0.8 + 1 + 5/6 + 1 = 2.02; token-mean 2.02 / 8
    t = hand_tokens()
    loss = Objective(AlgoConfig(), seeded=True, shaping_gamma=0.1).loss(t, loss_norms(t.mask))
    assert loss.value.item() == pytest.approx(2.02 / 8, abs=1e-6)
    loss.value.backward()
    want = torch.tensor([[-5 / 36, -0.25, 0.0], [1.0, 0.0, 1.0], [5 / 36, 1.0, 0.0]]) / 8
    torch.testing.assert_close(t.logprobs.grad, want)
    assert loss.tokens["shaped"].tolist() == [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    assert loss.tokens["clipped"].tolist() == [[0, 0, 1], [0, 1, 0], [0, 0, 0]]
    torch.testing.assert_close(loss.tokens["ratio"][0], torch.tensor([0.5, 0.1, 2.0]))
    torch.testing.assert_close(loss.tokens["pg_loss"][2, 0], torch.tensor(5 / 6))
    # Unshaped, the same tokens against pi_b := 1 keep PPO's clip: row 2's trace token (r = 0.5, A < 0) has no gradient.
    plain = hand_tokens(shaped=False)
    Objective(AlgoConfig(), seeded=True).loss(plain, loss_norms(plain.mask)).value.backward()
    assert plain.logprobs.grad[2, 0] == 0 and t.logprobs.grad[2, 0] > 0


def test_the_objective_needs_the_trace_tokens_when_it_shapes():
    t = hand_tokens(shaped=False)
    with pytest.raises(ValueError, match="needs shaped"):
        Objective(AlgoConfig(), seeded=True, shaping_gamma=0.1).loss(t, loss_norms(t.mask))


@pytest.fixture
def traces(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_text('{"question": "1+1", "response": "2"}\n')
    return path


def test_trace_tokens_stay_in_the_loss_against_pi_b_of_one(traces):
    cfg = compose_config(["ratio=50", "seeds.source=traces", f"seeds.source_path={traces}", "seeds.trace_logprobs=shaping"], idle=True).cfg
    trace = Sample(0, "p", [5, 6], [20, 21], [-1.0, -1.2], True, prefix_ids=[30, 31, 32], prefix_logprobs=[math.nan] * 3, behaviour_checkpoint="traces:t", behaviour_step=0)
    plain = Sample(0, "p", [5, 6], [23, 24, 25], [-0.5, -0.6, -0.4], True)
    batch = collate([trace, plain], torch.tensor([1.0, -1.0]), 0)
    old = torch.full(batch.resp_mask.shape, -0.7)
    denominators = ratio_denominators(old, batch, cfg)
    assert denominators[0, :3].tolist() == [0.0, 0.0, 0.0]  # log pi_b := log 1
    assert denominators[0, 3:5].tolist() == pytest.approx([-0.7, -0.7]) and denominators[1, :3].tolist() == pytest.approx([-0.7] * 3)
    assert torch.equal(loss_mask(batch, cfg), batch.resp_mask)  # unlike exclude, the trace tokens are trained
    assert shaping_gamma(cfg) == 0.1
    assert shaping_gamma(compose_config(["ratio=50", "seeds.source=traces", f"seeds.source_path={traces}"]).cfg) is None


@pytest.mark.parametrize("overrides, key, words", [
    (["seeds.shaping_gamma=0"], "seeds.shaping_gamma", "allowed: 0 < seeds.shaping_gamma < inf"),
    (["seeds.shaping_gamma=-0.1"], "seeds.shaping_gamma", "allowed: 0 < seeds.shaping_gamma < inf"),
    (["seeds.trace_logprobs=shaping", "seeds.source=self", "seeds.source_path=null"], "seeds.trace_logprobs", "read only with seeds.source=traces"),
    (["seeds.shaping_gamma=0.3"], "seeds.shaping_gamma", "read only with seeds.trace_logprobs=shaping"),
    (["seeds.trace_logprobs=shaping", "seeds.train_prefix=false"], "seeds.trace_logprobs", "seeds.train_prefix=false keeps every prefix token"),
    (["seeds.trace_logprobs=shaping", "algo.prefix_clip_c=5"], "algo.prefix_clip_c", "shaped trace token, which is never clipped"),
    (["seeds.trace_logprobs=shaping", "algo.stale_mask=m2po"], "algo.stale_mask", "seeds.trace_logprobs=shaping no prefix token"),
    (["ratio=0", "seeds.trace_logprobs=shaping"], "seeds.source", "ratio=0"),
    (["seeds.trace_logprobs=lufy"], "seeds.trace_logprobs", "choose one of exclude, cap, shaping"),
])
def test_shaping_where_it_cannot_take_effect_and_bad_gammas_are_refused_in_one_line(traces, overrides, key, words):
    with pytest.raises(ConfigError) as err:
        compose_config(["ratio=25", "seeds.source=traces", f"seeds.source_path={traces}", *overrides], idle=True)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
def test_a_micro_train_with_shaped_trace_seeds(micro, tmp_path):
    from tsctl.stages.train import train
    from tsctl.tasks.registry import build_task

    task = build_task(compose_config(micro[2:]).cfg.task)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps({"question": p.question, "response": p.solution}) + "\n" for p in task.problems("train")))
    shaping = ["seeds.source=traces", f"seeds.source_path={path}", "seeds.trace_logprobs=shaping", "seeds.shaping_gamma=0.2"]
    train(compose_config([*micro, "name=luffy", "ratio=25", *shaping, "trainer.eval_every=0"], idle=True))
    run = tmp_path / "runs" / "default" / "luffy"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3] and all(math.isfinite(r["pg_loss"]) for r in records)
    for r in records:
        assert r["tokens_by_source/prefix"] > 0 and 0 < r["shaped"] < 1  # some loss tokens shaped, not all
        assert r["shaped_by_source/prefix"] == 1 and r["shaped_by_source/suffix"] == 0 and r["shaped_by_source/plain"] == 0
        assert 0 < r["importance_ratio_by_source/prefix"] <= 1  # pi_theta of the trace tokens (pi_b := 1)
        assert r["clipped_by_source/prefix"] == 0
    assert "trace_logprobs: shaping" in (run / "config.yaml").read_text() and "shaping_gamma: 0.2" in (run / "config.yaml").read_text()
    with pytest.raises(ConfigError, match="ratio=0"):  # trace seeds (and their shaping) need seeded samples
        compose_config([*micro, "name=luffy0", "ratio=0", *shaping, "trainer.eval_every=0"], idle=True)
