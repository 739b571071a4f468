"""The per-step gap between the engine's log-probs and the trainer's recomputed pi_old."""

from __future__ import annotations

import math

import pytest
import torch

from tsctl.engines.hf import HFEngine
from tsctl.models.batch import collate
from tsctl.models.prompts import PromptFormatter
from tsctl.models.samples import Sample
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.bank import SeedBank
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task
from tsctl.trainer.context import StepContext
from tsctl.trainer.learner import Learner
from tsctl.trainer.optim import lr_lambda
from tsctl.trainer.parallel import Parallel
from tsctl.trainer.pi_old import logprob_gap
from tsctl.trainer.rollout import Sampler
from tsctl.trainer.step import train_step


def offset(j: int) -> float:
    """What the fake engine adds to the log-prob of its j-th generated token."""
    return 0.3 if j % 2 == 0 else -0.1


class OffEngine:
    """The hf engine, reporting every log-prob off by a known amount (and no token stats, so pi_old is recomputed)."""

    reports_token_stats = False

    def __init__(self, inner: HFEngine) -> None:
        self.inner = inner
        self.context_length = inner.context_length

    def generate(self, requests, params):
        out = self.inner.generate(requests, params)
        for c in out:
            c.logprobs = [lp + offset(j) for j, lp in enumerate(c.logprobs)]
        return out

    def load_weights(self, state_dict) -> None:
        self.inner.load_weights(state_dict)

    def sleep(self) -> None:
        self.inner.sleep()

    def wake_up(self) -> None:
        self.inner.wake_up()


def off_step(tmp_path, *overrides: str) -> tuple[dict[str, float], list]:
    """One micro train step (half its samples seeded) whose engine reports log-probs off by :func:`offset`;
    returns its record and the completions the step drew (the seeds' excluded)."""
    cfg = compose_config([
        "model=micro", "task=arithmetic", "task.train_size=200", "task.heldout_size=20", "engine.max_new_tokens=12",
        "trainer=micro", "trainer.batch_size=2", "trainer.n=4", "ratio=50", "refresh=1", *overrides,
    ]).cfg
    tokenizer = build_char_tokenizer()
    formatter = PromptFormatter(tokenizer, use_chat_template=False)
    task = build_task(cfg.task)
    problems = list(task.problems("train"))
    model = build_tiny_model(cfg.model.tiny, tokenizer, seed=0).eval()
    engine = OffEngine(HFEngine(model, formatter.eos_id, formatter.pad_id))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    seeds = SeedBank(tmp_path / "seeds", cfg, formatter, task, problems, tmp_path / "checkpoints", "unused")
    seeds.prepare(0, model, engine)
    drawn = []
    generate = engine.generate

    def recording(requests, params):
        drawn.append(generate(requests, params))
        return drawn[-1]

    engine.generate = recording
    learner = Learner(cfg, Parallel(model), engine=engine)
    learner.optimizer, learner.scheduler = optimizer, scheduler
    return train_step(0, StepContext(cfg, Sampler(engine, formatter, task, problems=problems), learner, seeds)), drawn


def test_the_gap_metrics_measure_a_known_engine_error(tmp_path):
    record, drawn = off_step(tmp_path)
    # Rollout tokens only (the prefixes are pi_b's): each carries its offset, plus float noise.
    expected = [offset(j) for completions in drawn for c in completions for j in range(len(c.token_ids))]
    assert record["logprob_gap/abs_mean"] == pytest.approx(sum(map(abs, expected)) / len(expected), abs=2e-4)
    assert record["logprob_gap/abs_max"] == pytest.approx(0.3, abs=2e-4)
    assert record["logprob_gap/mean"] == pytest.approx(sum(expected) / len(expected), abs=2e-4)
    assert record["logprob_gap/ratio_mean"] == pytest.approx(sum(math.exp(x) for x in expected) / len(expected), abs=2e-4)


def test_the_gap_counts_generated_tokens_only():
    samples = [
        Sample(group=0, prompt_id="p", prompt_ids=[1, 2], generated_ids=[5, 6], generated_logprobs=[-1.0, -2.0], finished=True,
               prefix_ids=[3, 4], prefix_logprobs=[-9.0, -9.0]),
        Sample(group=0, prompt_id="p", prompt_ids=[1, 2], generated_ids=[7], generated_logprobs=[-0.5], finished=True),
    ]
    batch = collate(samples, torch.zeros(2), 0)
    engine = batch.engine_logprobs
    assert engine.tolist() == [[0.0, 0.0, -1.0, -2.0], [-0.5, 0.0, 0.0, 0.0]]
    trainer = torch.tensor([[-5.0, -5.0, -1.5, -2.0], [-0.25, 3.0, 3.0, 3.0]])  # prefix and padding values must not count
    gap = logprob_gap(engine, trainer, batch)
    assert gap["logprob_gap/abs_mean"] == pytest.approx((0.5 + 0.0 + 0.25) / 3)
    assert gap["logprob_gap/abs_max"] == pytest.approx(0.5)
    assert gap["logprob_gap/mean"] == pytest.approx((0.5 + 0.0 - 0.25) / 3)
    assert gap["logprob_gap/ratio_mean"] == pytest.approx((math.exp(0.5) + 1 + math.exp(-0.25)) / 3)
