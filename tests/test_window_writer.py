"""Who writes a window's seeds: ``latest`` is exactly the pool-less call; an older snapshot writes with its own pi_b."""

import copy

import pytest
import torch

from tsctl.engines.hf import HFEngine
from tsctl.models.prompts import PromptFormatter
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.seeds.behaviour import WindowWriter
from tsctl.seeds.generate import seed_columns
from tsctl.runconfig import compose_config
from tsctl.tasks.registry import build_task

BASE = ["model=micro", "task=arithmetic", "task.train_size=200", "task.heldout_size=20", "engine.max_new_tokens=12", "ratio=50", "refresh=2", "seeds.probe_prompts=4", "seeds.probe_samples=2"]


@pytest.fixture
def setup():
    cfg = compose_config(BASE).cfg
    tok = build_char_tokenizer()
    model = build_tiny_model(cfg.model.tiny, tok, seed=0).eval()
    fmt = PromptFormatter(tok)
    task = build_task(cfg.task)
    return model, fmt, task, list(task.problems("train")), HFEngine(model, fmt.eos_id, fmt.pad_id)


def writer(tmp_path, setup, *overrides):
    model, fmt, task, problems, _ = setup
    cfg = compose_config([*BASE, *overrides]).cfg
    return cfg, WindowWriter(tmp_path / "seeds", cfg, fmt, task, problems)


@pytest.mark.parametrize("overrides", [(), ("seeds.selector=uniform", "seeds.pool_size=3"), ("seeds.selector=max_entropy", "seeds.pool_size=2")])
def test_the_first_window_is_the_pool_less_call_whatever_the_selector(tmp_path, setup, overrides):
    model, fmt, task, problems, engine = setup
    cfg, w = writer(tmp_path, setup, *overrides)
    got = w.columns(0, problems[:4], [0, 0, 1, 1], 2, 77, model, engine)
    direct = seed_columns(model, engine, fmt, task, problems[:4], 2, cfg, checkpoint="step-0", checkpoint_step=0, sample_seed=77, serve_steps=[0, 0, 1, 1])
    assert got == direct
    assert (tmp_path / "seeds" / "pool" / "step-000000").is_dir() == bool(overrides)  # latest saves no snapshot


def test_an_older_snapshot_writes_its_seeds_with_its_own_log_probs(tmp_path, setup):
    model, fmt, task, problems, engine = setup
    cfg, w = writer(tmp_path, setup, "seeds.selector=oldest", "seeds.pool_size=3")
    w.columns(0, problems[:2], [0, 0], 2, 1, model, engine)
    before = copy.deepcopy(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # "training" between the windows
    cols = w.columns(2, problems[2:5], [2, 2, 3], 2, 2, model, engine)
    assert cols["checkpoint"] == ["step-0"] * 6 and cols["checkpoint_step"] == [0] * 6
    assert [p.name for p in sorted((tmp_path / "seeds" / "pool").iterdir())] == ["step-000000", "step-000002"]
    for prompt, response, logprobs in zip(cols["prompt_ids"], cols["response_ids"], cols["logprobs"]):
        ids = torch.tensor([prompt + response])
        target = torch.tensor(response).unsqueeze(1)
        with torch.no_grad():
            old = torch.log_softmax(before(ids).logits[0, len(prompt) - 1 : -1] / 0.6, -1).gather(1, target)[:, 0]
            new = torch.log_softmax(model(ids).logits[0, len(prompt) - 1 : -1] / 0.6, -1).gather(1, target)[:, 0]
        torch.testing.assert_close(torch.tensor(logprobs), old, atol=1e-4, rtol=0)
        assert not torch.allclose(torch.tensor(logprobs), new, atol=1e-3)


def test_mixed_arms_keep_prompt_order_and_the_latest_rows_are_the_live_models(tmp_path, setup):
    model, fmt, task, problems, engine = setup
    cfg, w = writer(tmp_path, setup, "seeds.selector=uniform", "seeds.pool_size=2")
    w.columns(0, problems[:2], [0, 0], 2, 1, model, engine)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    window = problems[2:14]
    cols = w.columns(2, window, [2] * 6 + [3] * 6, 2, 5, model, engine)
    assert cols["prompt_id"] == [p.id for p in window for _ in range(2)]
    arms = cols["checkpoint"][::2]
    assert set(arms) == {"step-0", "step-2"} and all(a == b for a, b in zip(cols["checkpoint"][::2], cols["checkpoint"][1::2]))
    live = [p for p, a in zip(window, arms) if a == "step-2"]
    steps = [s for s, a in zip([2] * 6 + [3] * 6, arms) if a == "step-2"]
    direct = seed_columns(model, engine, fmt, task, live, 2, cfg, checkpoint="step-2", checkpoint_step=2, sample_seed=5, serve_steps=steps)
    rows = [i for i, c in enumerate(cols["checkpoint"]) if c == "step-2"]
    assert [cols["response_ids"][i] for i in rows] == direct["response_ids"]
