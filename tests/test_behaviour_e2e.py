"""End-to-end ``tsctl train`` with a behaviour pool and outside seed sources, on micro sizes."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import kill, metrics, stable_metrics, tsctl
from tsctl.config.schema import TinyModelConfig
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer

pytestmark = pytest.mark.slow

def arm_choices(run: Path) -> dict[str, list[str]]:
    return {p.name: pq.read_table(p).column("checkpoint").to_pylist() for p in sorted((run / "seeds").glob("step-*.parquet"))}


def test_bandit_pool_sigkill_then_resume_gives_the_same_arm_choices_and_metrics(micro, tmp_path):
    args = [*micro, "ratio=50", "refresh=1", "seeds.selector=bandit", "seeds.pool_size=2", "trainer.steps=4", "trainer.save_every=2", "trainer.eval_every=0"]
    tsctl("train", *args, "name=full")
    run = tmp_path / "runs" / "default" / "killed"
    kill([*args, "name=killed"], ("step-logged", 3))  # steps 1..3 logged, step-3's checkpoint not yet written
    assert (run / "checkpoints" / "step-2").is_dir() and not (run / "checkpoints" / "step-4").exists()
    killed_log = (run / "seeds" / "pool" / "arms.jsonl").read_text().splitlines()
    assert len(killed_log) >= 3  # the killed run's bandit saw steps past its checkpoint, which resume forgets
    tsctl("train", *args, "name=killed", "resume=true")
    full = tmp_path / "runs" / "default" / "full"
    choices = arm_choices(full)
    assert choices == arm_choices(run) and len(choices) == 4
    assert any(f"step-{s - 1}" in c for s, c in enumerate(choices.values()) if s)  # the older snapshot wrote some seeds
    assert (full / "seeds" / "pool" / "arms.jsonl").read_text() == (run / "seeds" / "pool" / "arms.jsonl").read_text()
    assert sorted(p.name for p in (run / "seeds" / "pool").glob("step-*")) == ["step-000002", "step-000003"]  # pruned to 2
    a_records, b_records = stable_metrics(full), stable_metrics(run)
    assert [r["step"] for r in b_records] == [1, 2, 3, 4]
    for a, b in zip(a_records, b_records):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), (a["step"], key)
    assert any("seeds/by_arm/1/samples" in r for r in a_records)


@pytest.mark.parametrize("mode", ["exclude", "cap"])
def test_trace_seeds_train_under_each_ratio_rule(micro, tmp_path, mode):
    from tsctl.runconfig import compose_config
    from tsctl.tasks.registry import build_task

    task = build_task(compose_config(micro[2:]).cfg.task)
    rows = [{"question": p.question, "response": p.solution} for p in list(task.problems("train"))]
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tsctl("train", *micro, "name=t", "ratio=50", "trainer.steps=2", "trainer.eval_every=0", "seeds.source=traces", f"seeds.source_path={traces}", f"seeds.trace_logprobs={mode}")
    records = metrics(tmp_path / "runs" / "default" / "t")
    for r in records:
        assert r["tokens_by_source/prefix"] > 0 and r["seeds/by_source/traces/samples"] == 8
        assert all(v == v for v in r.values() if isinstance(v, float))  # no NaN reached the metrics
        if mode == "exclude":
            assert "importance_ratio_by_source/prefix" not in r  # no prefix token in the loss
        else:
            assert abs(r["importance_ratio_by_source/prefix"] - 1) < 0.05  # pi_b := pi_old: the ratio starts at 1


def test_seeds_from_another_model_and_a_mismatched_tokenizer(micro, tmp_path):
    tok = build_char_tokenizer()
    good, bad = tmp_path / "good", tmp_path / "bad"
    build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tok, seed=3).save_pretrained(good)
    tok.save_pretrained(good)
    other = build_char_tokenizer()
    other.add_tokens(["<step>"])
    build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), other, seed=3).save_pretrained(bad)
    other.save_pretrained(bad)
    args = [*micro, "ratio=50", "trainer.steps=1", "trainer.eval_every=0", "seeds.source=model"]
    tsctl("train", *args, "name=good", f"seeds.source_path={good}")
    record = metrics(tmp_path / "runs" / "default" / "good")[0]
    assert record["seeds/by_source/model/samples"] == 8 and "seeds/by_arm/0/samples" not in record
    proc = tsctl("train", *args, "name=bad", f"seeds.source_path={bad}", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = (proc.stdout + proc.stderr).strip()
    assert "seeds.source_path" in line and "not the policy's" in line and "'<step>'" in line
    assert not (tmp_path / "runs" / "default" / "bad").exists()  # refused before the run folder is made
