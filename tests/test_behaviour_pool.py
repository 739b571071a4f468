"""The behaviour pool on disk (snapshots, pruning, resume), the bandit's reward log and the attribution metrics."""

import json

import pytest
import torch
from safetensors.torch import load_file

from tsctl.config.schema import TinyModelConfig
from tsctl.models.samples import Sample
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.arm_log import ArmLog
from tsctl.seeds.attribution import arm_rewards, attribution_metrics, pow2_bin
from tsctl.seeds.base import arm_of
from tsctl.seeds.sources import source_of
from tsctl.seeds.behaviour import _interleave
from tsctl.seeds.pool import BehaviourPool, probe_problems
from tsctl.tasks.base import Problem

TINY = TinyModelConfig(hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_position_embeddings=64)


@pytest.fixture(scope="module")
def tiny():
    tok = build_char_tokenizer()
    return tok, [build_tiny_model(TINY, tok, seed=s) for s in range(2)]


def test_pool_keeps_the_newest_snapshots_and_lists_them_newest_first(tmp_path, tiny):
    tok, (model, _) = tiny
    pool = BehaviourPool(tmp_path / "pool", size=2)
    for step in (0, 2, 4, 6):
        pool.add(step, model, tok, surprisal=step / 10)
    assert sorted(p.name for p in (tmp_path / "pool").iterdir()) == ["step-000004", "step-000006"]
    assert [(s.step, s.surprisal) for s in pool.snapshots()] == [(6, 0.6), (4, 0.4)]
    assert [s.step for s in pool.arms(6)] == [6, 4]
    assert [s.step for s in pool.arms(5)] == [4]  # a snapshot taken after a window opened is not its arm


def test_an_existing_snapshot_is_kept_as_written_and_interrupted_writes_are_ignored(tmp_path, tiny):
    tok, (model, other) = tiny
    pool = BehaviourPool(tmp_path / "pool", size=3)
    pool.add(2, model, tok)
    pool.add(2, other, tok)  # a resumed run reaching the same window again: no rewrite
    saved = load_file(pool.path(2) / "model.safetensors")
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items() if k in saved)
    assert not all(torch.equal(saved[k], v) for k, v in other.state_dict().items() if k in saved)
    (tmp_path / "pool" / "step-000004").mkdir()  # killed before snapshot.json: not a snapshot
    (tmp_path / "pool" / ".step-000006.abc.tmp").mkdir()
    assert [s.step for s in pool.snapshots()] == [2]
    pool.prune()
    assert not (tmp_path / "pool" / ".step-000006.abc.tmp").exists()


def test_probe_set_is_fixed_per_seed():
    problems = [Problem(id=str(i), question=f"q{i}", answer="1") for i in range(100)]
    a, b, c = probe_problems(problems, 8, 0), probe_problems(problems, 8, 0), probe_problems(problems, 8, 1)
    assert [p.id for p in a] == [p.id for p in b] and [p.id for p in a] != [p.id for p in c] and len({p.id for p in a}) == 8
    assert len(probe_problems(problems[:5], 8, 0)) == 5


def test_arm_log_sums_steps_truncates_on_resume_and_ignores_a_torn_line(tmp_path):
    log = ArmLog(tmp_path / "arms.jsonl")
    log.append(1, {0: (0.5, 2)})
    log.append(2, {0: (-0.25, 1), 1: (1.0, 3)})
    log.append(3, {1: (2.0, 1)})
    assert log.totals() == {0: (3, 0.25), 1: (4, 3.0)}
    with open(tmp_path / "arms.jsonl", "a") as f:
        f.write('{"arms": {"0": [9.0')  # a kill mid-write
    assert log.totals() == {0: (3, 0.25), 1: (4, 3.0)}
    log.truncate(2)
    assert [r["step"] for r in log.records()] == [1, 2] and log.totals() == {0: (3, 0.25), 1: (3, 1.0)}
    assert json.loads((tmp_path / "arms.jsonl").read_text().splitlines()[-1])["arms"] == {"0": [-0.25, 1], "1": [1.0, 3]}


def test_interleave_puts_each_arms_rows_back_in_prompt_order():
    choice = [1, 0, 1]  # prompts a, b, c; k = 2 rows each
    parts = {0: {"x": ["b0", "b1"]}, 1: {"x": ["a0", "a1", "c0", "c1"]}}
    assert _interleave(parts, choice, 2) == {"x": ["a0", "a1", "b0", "b1", "c0", "c1"]}


def test_bins_sources_and_arms():
    assert [pow2_bin(x) for x in (0, 1, 2, 3, 4, 7, 8, 33)] == ["0", "1", "2-3", "2-3", "4-7", "4-7", "8-15", "32-63"]
    assert [source_of(c) for c in ("step-4", "model:/m", "traces:t.jsonl")] == ["self", "model", "traces"]
    assert arm_of(behaviour_step=2, step=5, length=2) == 1 and arm_of(4, 5, 2) == 0 and arm_of(0, 9, 10) == 0 and arm_of(0, 9, 3) == 3


def sample(reward: float, prefix: int, step: int, checkpoint: str, seeded: bool = True) -> Sample:
    return Sample(group=0, prompt_id="p", prompt_ids=[1], generated_ids=[5, 6], generated_logprobs=[-1.0, -1.0], finished=True,
                  prefix_ids=[7] * prefix, prefix_logprobs=[-1.0] * prefix, behaviour_step=step if seeded else -1,
                  behaviour_checkpoint=checkpoint, reward=reward, seeded=seeded)


def test_attribution_metrics_by_hand():
    samples = [
        sample(1.0, 3, 4, "step-4"),  # step 5, refresh 2: window 4, arm 0, age 1, prefix bin 2-3
        sample(0.0, 0, 2, "step-2"),  # arm 1, age 3, a cut-0 seed: prefix bin 0
        sample(1.0, 8, 4, "model:/m"),  # another model: age 1, prefix bin 8-15, no arm
        sample(1.0, 0, -1, "", seeded=False),  # plain: left out
    ]
    adv = torch.tensor([0.5, -0.5, 1.0, 2.0])
    got = attribution_metrics(samples, adv, step=5, length=2)
    expected = {
        "by_age/1": (1.0, 0.75, 2), "by_age/2-3": (0.0, -0.5, 1),
        "by_arm/0": (1.0, 0.5, 1), "by_arm/1": (0.0, -0.5, 1),
        "by_prefix/0": (0.0, -0.5, 1), "by_prefix/2-3": (1.0, 0.5, 1), "by_prefix/8-15": (1.0, 1.0, 1),
        "by_source/model": (1.0, 1.0, 1), "by_source/self": (0.5, 0.0, 2),
    }
    want = {f"seeds/{k}/{name}": v for k, vals in expected.items() for name, v in zip(("accuracy", "advantage", "samples"), vals)}
    assert got == pytest.approx(want) and set(got) == set(want)
    assert arm_rewards(samples, adv, step=5, length=2) == {0: (0.5, 1), 1: (-0.5, 1)}
    assert attribution_metrics(samples[3:], adv[3:], 5, 2) == {}  # no seeded sample (every ratio=0 step): nothing
