"""``SeedBank``: which shard rows serve which step (window offsets), and resume (read back, or written again alike)."""

from __future__ import annotations

import pytest
import torch

from tsctl.engines.hf import HFEngine
from tsctl.io.checkpoints import save_checkpoint
from tsctl.io.shards import ShardError, checksum_path, read_shard
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.bank import SeedBank
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task
from tsctl.tasks.schedule import step_prompts

# refresh 3 over 8 steps: windows 0..2, 3..5, 6..7; 2 prompts a step, k = round(4 * 50 / 100) = 2 seeds each.
BASE = [
    "model=micro", "task=arithmetic", "task.train_size=200", "task.heldout_size=20", "engine.max_new_tokens=10",
    "ratio=50", "refresh=3", "trainer.steps=8", "trainer.batch_size=2", "trainer.n=4", "seed=4",
]
K, BATCH = 2, 2


class CountingEngine:
    """The ``hf`` engine, counting ``generate`` calls."""

    def __init__(self, inner: HFEngine) -> None:
        self.inner, self.calls = inner, 0
        self.reports_token_stats = inner.reports_token_stats
        self.context_length = inner.context_length

    def generate(self, requests, params):
        self.calls += 1
        return self.inner.generate(requests, params)

    def load_weights(self, state_dict) -> None:
        self.inner.load_weights(state_dict)


@pytest.fixture
def run(tmp_path):
    cfg = compose_config(BASE).cfg
    tok = build_char_tokenizer()
    model = build_tiny_model(cfg.model.tiny, tok, seed=0).eval()
    fmt = PromptFormatter(tok)
    task = build_task(cfg.task)
    problems = list(task.problems("train"))
    engine = CountingEngine(HFEngine(model, fmt.eos_id, fmt.pad_id))

    def bank() -> SeedBank:
        return SeedBank(tmp_path / "seeds", cfg, fmt, task, problems, tmp_path / "checkpoints", "unused-base")

    return cfg, model, tok, problems, engine, bank


def shard_rows(bank: SeedBank, first: int) -> dict[str, list]:
    return read_shard(bank.path(first), "seed").table.to_pydict()


def test_windows_and_the_rows_each_step_reads(run):
    cfg, model, _, problems, engine, bank_of = run
    bank = bank_of()
    assert [bank.window(s) for s in (0, 2, 3, 5, 6, 7)] == [(0, 3), (0, 3), (3, 6), (3, 6), (6, 8), (6, 8)]
    for step in range(cfg.trainer.steps):
        bank.prepare(step, model, engine)
        first = bank.window(step)[0]
        table = shard_rows(bank, first)
        indices = step_prompts(cfg.seed, step, BATCH, len(problems))
        seeds = bank.for_step(step, indices)
        # Rows are (step, prompt, slot): step s of the window starts at row (s - first) * batch_size * k.
        offset = (step - first) * BATCH * K
        assert [len(group) for group in seeds] == [K] * BATCH
        for g, group in enumerate(seeds):
            for slot, seed in enumerate(group):
                row = offset + g * K + slot
                assert table["prompt_id"][row] == problems[indices[g]].id
                assert seed.prefix_ids == table["response_ids"][row][: table["cut"][row]]
                assert seed.behaviour_step == first and seed.checkpoint == f"step-{first}"
    # One shard per window, written once at the window's first step; the last window is cut at the run's end.
    assert engine.calls == 3
    assert [len(shard_rows(bank, first)["prompt_id"]) for first in (0, 3, 6)] == [3 * BATCH * K, 3 * BATCH * K, 2 * BATCH * K]
    assert read_shard(bank.path(6), "seed").metadata == {"first_step": "6", "last_step": "8"}


def test_a_shard_whose_rows_belong_to_other_prompts_is_refused(run):
    cfg, model, _, problems, engine, bank_of = run
    bank = bank_of()
    bank.prepare(0, model, engine)
    other = step_prompts(cfg.seed, 5, BATCH, len(problems))  # prompts of another step
    assert other != step_prompts(cfg.seed, 1, BATCH, len(problems))
    with pytest.raises(ShardError, match="row 4 is for prompt .*, expected .*delete the shard"):
        bank.for_step(1, other)


def test_a_resumed_bank_reads_its_window_back_without_generating(run):
    cfg, model, _, problems, engine, bank_of = run
    first = bank_of()
    for step in range(5):
        first.prepare(step, model, engine)
    expected = first.for_step(4, step_prompts(cfg.seed, 4, BATCH, len(problems)))
    calls = engine.calls
    resumed = bank_of()  # a new process resuming at step 4, inside window 3..5
    resumed.check_resume(4, model, engine)
    resumed.prepare(4, model, engine)
    assert engine.calls == calls
    assert resumed.for_step(4, step_prompts(cfg.seed, 4, BATCH, len(problems))) == expected


def test_a_lost_shard_is_written_again_from_the_window_checkpoint_with_the_same_seeds(run, tmp_path):
    cfg, model, tok, problems, engine, bank_of = run
    first = bank_of()
    first.prepare(3, model, engine)  # window 3 opens: the current weights write it
    save_checkpoint(tmp_path / "checkpoints", 3, model, tok, {})
    written = shard_rows(first, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # training went on after the window opened
        trained = {k: v.clone() for k, v in model.state_dict().items()}
    first.path(3).unlink()
    checksum_path(first.path(3)).unlink()
    resumed = bank_of()
    resumed.check_resume(4, model, engine)
    resumed.prepare(4, model, engine)
    assert shard_rows(resumed, 3) == written  # step-3's weights, the window's sampling seed: the same seeds
    assert all(torch.equal(v, trained[k]) for k, v in model.state_dict().items())  # the current weights are back
    assert (tmp_path / "seeds" / "step-000003.parquet.sha256").is_file()


def test_a_lost_shard_without_its_checkpoint_stops_the_resume_before_anything_runs(run):
    cfg, model, _, problems, engine, bank_of = run
    first = bank_of()
    first.prepare(3, model, engine)
    first.path(3).unlink()
    with pytest.raises(ShardError, match="checkpoint step-3, the behaviour policy that wrote it, is gone"):
        bank_of().check_resume(4, model, engine)
