"""``tsctl eval``: metrics, output files, checkpoint selection, bad input and overwrite protection.

End-to-end runs go through the CLI where its behaviour is the point (the printed table, exit codes);
the rest call the stage in-process, which keeps the file well under a minute on two cores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import SHARED_DATA, tsctl
from tsctl.config.errors import ConfigError
from tsctl.config.schema import TinyModelConfig
from tsctl.evaluation import benchmark_scores as scores
from tsctl.evaluation.run_task import refuse_other_task
from tsctl.evaluation.scoring import Scored
from tsctl.evaluation.suites import load_suites
from tsctl.evaluation.targets import resolve_model, resolve_targets
from tsctl.io.runs import RunError
from tsctl.io.shards import read_shard
from tsctl.models.tiny import build_tiny_model
from tsctl.models.tokenizer import build_char_tokenizer
from tsctl.runconfig import compose_config
from tsctl.stages.eval import evaluate
from tsctl.stages.warmup import base_model_path
from tsctl.tasks.records import DataError

SMALL = ["eval.k=4", "eval.pass_k=[1,2,4]", "eval.limit=8"]
RESULT_KEYS = {
    "checkpoint", "checkpoint_path", "step", "benchmark", "task", "problems", "skipped_rows", "too_long_prompts", "k", "greedy_accuracy",
    "pass@1", "pass@2", "pass@4", "entropy", "mean_length", "truncation_rate", "answer_found", "sampling", "seconds",
}


def scored(rewards: list[list[float]]) -> Scored:
    """A :class:`Scored` holding only rewards (what the solve rates read)."""
    array = np.asarray(rewards, dtype=np.float64)
    return Scored(array, np.ones(array.shape, int), np.ones(array.shape, bool), [], [])


def fake_run(root: Path, model: Path, steps: list[int]) -> Path:
    """A run folder whose checkpoints ``step-N`` are copies of ``model`` (plus an incomplete step-99)."""
    for step in steps:
        folder = root / "checkpoints" / f"step-{step}"
        shutil.copytree(model, folder)
        torch.save({"step": step}, folder / "trainer_state.pt")
    (root / "checkpoints" / "step-99").mkdir(parents=True)
    return root


def bad_benchmark(tmp_path: Path, lines: list[str] | None) -> Path:
    """A benchmark YAML over a JSONL file with ``lines`` (no file at all when None)."""
    data = tmp_path / "bench.jsonl"
    if lines is not None:
        data.write_text("\n".join(lines) + "\n")
    yaml = tmp_path / "bench.yaml"
    yaml.write_text(f"name: bench\npath: {data}\nquestion_field: q\nanswer_field: a\ngrader: exact\ninstruction: ''\n")
    return yaml


def test_solve_rates_are_pass_at_k_of_the_samples_and_greedy_accuracy() -> None:
    rates = scores.solve_rates(scored([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]), scored([[1], [0], [0]]), [1, 2, 4])
    assert rates["greedy_accuracy"] == pytest.approx(1 / 3)
    assert rates["pass@1"] == pytest.approx(5 / 12)
    assert rates["pass@2"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert rates["pass@4"] == pytest.approx(2 / 3)


def test_entropy_does_not_depend_on_the_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tokenizer, seed=0).eval()
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 40, (int(n),), generator=generator).tolist() for n in (3, 7, 5, 2)]
    responses = [torch.randint(3, 40, (int(n),), generator=generator).tolist() for n in (6, 1, 9, 4)]
    whole = scores.mean_entropy(model, prompts, responses, 1.0, tokenizer.pad_token_id)
    monkeypatch.setattr(scores, "ENTROPY_CHUNK_TOKENS", 12)
    chunked = scores.mean_entropy(model, prompts, responses, 1.0, tokenizer.pad_token_id)
    assert 0 < whole < np.log(tokenizer.vocab_size)
    assert chunked == pytest.approx(whole, rel=1e-5)


def test_entropy_the_engine_reports_equals_the_teacher_forced_one() -> None:
    from tsctl.engines.base import Request, SamplingParams
    from tsctl.engines.hf import HFEngine

    tokenizer = build_char_tokenizer()
    model = build_tiny_model(TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64), tokenizer, seed=0).eval()
    prompts = [[1, 7, 9], [1, 12], [1, 20, 21, 22]] * 3
    engine = HFEngine(model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    completions = engine.generate([Request(p) for p in prompts], SamplingParams(temperature=0.7, max_new_tokens=10, seed=2))
    teacher = scores.mean_entropy(model, prompts, [c.token_ids for c in completions], 0.7, tokenizer.pad_token_id)
    assert 0 < teacher and scores.reported_entropy(completions) == pytest.approx(teacher, abs=1e-5)


def test_checkpoints_are_chosen_by_step_and_results_placed_beside_them(micro: list[str], tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    run = fake_run(tmp_path / "run", model, [1, 2])

    def targets(*overrides: str):
        return resolve_targets(compose_config([*micro, *overrides]).cfg, base_model_path)

    assert [t.step for t in targets(f"eval.checkpoint={run}")] == [2]
    assert [(t.label, t.out_dir) for t in targets(f"eval.checkpoint={run}", "eval.step=all")] == [
        ("step-1", run / "eval" / "step-1"), ("step-2", run / "eval" / "step-2"),
    ]
    assert [t.step for t in targets(f"eval.checkpoint={run}", "eval.step=1")] == [1]
    assert targets(f"eval.checkpoint={run / 'checkpoints' / 'step-1'}")[0].out_dir == run / "eval" / "step-1"
    assert targets(f"eval.checkpoint={model}")[0].out_dir == tmp_path / "runs" / "default" / "eval" / "model"
    with pytest.raises(ConfigError, match="no complete checkpoint step-7; available steps: 1, 2"):
        targets(f"eval.checkpoint={run}", "eval.step=7")
    with pytest.raises(ConfigError, match="use last, all or a step number"):
        targets(f"eval.checkpoint={run}", "eval.step=best")
    with pytest.raises(RunError, match="no complete checkpoint"):
        targets(f"eval.checkpoint={fake_run(tmp_path / 'empty', model, [])}")
    with pytest.raises(ConfigError, match="'eval.checkpoint'.*nowhere does not exist"):
        targets(f"eval.checkpoint={tmp_path / 'nowhere'}")
    cfg = compose_config(micro).cfg
    assert resolve_model(cfg, str(run), "1", "shards", base_model_path).step == 1
    with pytest.raises(ConfigError, match="'shards.step'.*several checkpoints"):
        resolve_model(cfg, str(run), "all", "shards", base_model_path)


def test_a_run_is_scored_on_its_held_out_split_only_under_its_own_task(micro: list[str], tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    run = fake_run(tmp_path / "run", model, [1])
    (run / "config.yaml").write_text("task:\n  name: countdown\n")
    with pytest.raises(ConfigError, match=r"'task'.*trained on task=countdown.*task=arithmetic; rerun with task=countdown"):
        evaluate(compose_config([*micro, *SMALL, f"eval.checkpoint={run}"]))
    assert not (run / "eval").exists()
    cfg = compose_config([*micro, "task=countdown", f"eval.checkpoint={run}"]).cfg
    refuse_other_task(resolve_targets(cfg, base_model_path), load_suites(cfg), cfg)  # its own task is accepted


@pytest.mark.slow
def test_eval_of_the_warmup_model_writes_results_samples_and_a_table(micro: list[str], tmp_path: Path) -> None:
    proc = tsctl("eval", *micro, *SMALL)
    out_dir = next((tmp_path / "runs" / "default" / "eval").glob("builtin-*"))
    result = json.loads((out_dir / "heldout.json").read_text())
    assert set(result) == RESULT_KEYS
    assert result["problems"] == 8 and result["too_long_prompts"] == 0 and result["k"] == 4 and result["step"] is None
    assert result["task"] == "arithmetic" and result["benchmark"] == "heldout"
    for key in ("greedy_accuracy", "pass@1", "pass@2", "pass@4", "truncation_rate"):
        assert 0 <= result[key] <= 1, key
    assert result["answer_found"] > 0.5 and "states a final answer" not in proc.stderr  # the warmed-up model writes its answer line
    assert result["pass@1"] <= result["pass@2"] <= result["pass@4"]
    assert result["entropy"] > 0 and 0 < result["mean_length"] <= 24
    samples = read_shard(out_dir / "heldout.parquet", "eval").table.to_pylist()
    sampled = [row for row in samples if not row["greedy"]]
    assert len(sampled) == 8 * 4 and len(samples) == 8 * 5
    assert {sum(row["problem_id"] == pid for row in sampled) for pid in {row["problem_id"] for row in samples}} == {4}
    assert all(row["tokens"] == len(row["response_ids"]) for row in samples)
    assert "heldout" in proc.stderr and "pass@4" in proc.stderr and out_dir.name in proc.stderr


@pytest.mark.slow
def test_existing_results_are_refused_unless_overwrite_is_set(micro: list[str], tmp_path: Path) -> None:
    small = [*micro, "eval.k=2", "eval.pass_k=[1,2]", "eval.limit=2"]
    first = evaluate(compose_config(small))[0]
    with pytest.raises(RunError, match=r"eval results already exist: .*heldout\.json.*eval\.overwrite=true"):
        evaluate(compose_config(small))
    result_file = tmp_path / "runs" / "default" / "eval" / first["checkpoint"] / "heldout.json"
    assert json.loads(result_file.read_text()) == first
    evaluate(compose_config([*small, "eval.limit=3", "eval.overwrite=true"]))
    assert json.loads(result_file.read_text())["problems"] == 3


@pytest.mark.slow
def test_eval_of_a_run_folder_gives_one_row_per_checkpoint(micro: list[str], tmp_path: Path) -> None:
    run = fake_run(tmp_path / "run", Path(base_model_path(compose_config(micro).cfg)), [1, 2])
    proc = tsctl("eval", *micro, "eval.k=2", "eval.pass_k=[1,2]", "eval.limit=4", f"eval.checkpoint={run}", "eval.step=all")
    rows = [line for line in proc.stderr.splitlines() if "│ heldout" in line]
    assert [row.split("│")[1].strip() for row in rows] == ["step-1", "step-2"]
    for step in (1, 2):
        assert json.loads((run / "eval" / f"step-{step}" / "heldout.json").read_text())["step"] == step


@pytest.mark.slow
def test_each_checkpoint_is_scored_with_its_own_weights(micro: list[str], tmp_path: Path) -> None:
    run = fake_run(tmp_path / "run", Path(base_model_path(compose_config(micro).cfg)), [1, 2])
    weights = run / "checkpoints" / "step-2" / "model.safetensors"
    generator = torch.Generator().manual_seed(0)
    save_file({k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in load_file(weights).items()}, weights)
    small = [*micro, "eval.k=2", "eval.pass_k=[1,2]", "eval.limit=6", f"eval.checkpoint={run}"]
    both = evaluate(compose_config([*small, "eval.step=all"]))
    alone = evaluate(compose_config([*small, "eval.step=2", "eval.overwrite=true"]))

    def same(result: dict) -> dict:
        return {k: v for k, v in result.items() if k != "seconds"}

    assert [r["step"] for r in both] == [1, 2]
    assert same(both[1]) == same(alone[0])
    assert both[0]["entropy"] != both[1]["entropy"]


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "benchmarks" / "math500").is_dir(), reason=f"MATH-500 not found under {SHARED_DATA}")
def test_math500_with_a_limit_completes(micro: list[str], tmp_path: Path) -> None:
    args = [*micro, "eval.benchmarks=[math500]", "eval.limit=3", "eval.k=2", "eval.pass_k=[1,2]"]
    # The built-in model serves 256 tokens: with 24 for the response, two of these prompts (character tokens) do not fit.
    refused = tsctl("eval", *args, check=False)
    assert refused.returncode == 2 and "2 of 3 math500 prompts are longer than the 232 tokens" in refused.stdout + refused.stderr
    assert not list((tmp_path / "runs" / "default" / "eval").glob("*/math500.json"))
    tsctl("eval", *args, "task.overlong_prompts=drop")
    result = json.loads(next((tmp_path / "runs" / "default" / "eval").glob("builtin-*/math500.json")).read_text())
    assert result["problems"] == 1 and result["too_long_prompts"] == 2 and result["benchmark"] == "math500"
    assert all(0 <= result[key] <= 1 for key in ("greedy_accuracy", "pass@1", "pass@2", "truncation_rate"))


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (None, ["bench.jsonl", "not found"]),
        (['{"q": "1+1=", "a": "2"}', '{"q": "2+2=", "a": '], ["bench.jsonl line 2", "malformed JSON"]),
        (['{"q": "1+1=", "a": "2"}', '{"q": "2+2="}'], ["bench.jsonl line 2", "missing field 'a'"]),
    ],
    ids=["missing-file", "malformed-line", "missing-field"],
)
def test_bad_data_is_named_by_file_line_and_field(micro, tmp_path, lines, expected) -> None:
    cfg = compose_config([*micro, f"eval.benchmarks=[{bad_benchmark(tmp_path, lines)}]"]).cfg
    with pytest.raises(DataError) as error:
        load_suites(cfg)
    assert all(text in str(error.value) for text in expected), error.value


@pytest.mark.slow
def test_a_user_error_is_one_line_with_exit_code_2(micro: list[str], tmp_path: Path) -> None:
    benchmark = bad_benchmark(tmp_path, ['{"q": "1+1=", "a": "2"}', '{"q": "2+2="}'])
    proc = tsctl("eval", *micro, f"eval.benchmarks=[{benchmark}]", check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and f"{benchmark.with_suffix('.jsonl')} line 2: missing field 'a'" in lines[0]


@pytest.mark.slow
def test_bad_rows_are_skipped_and_counted_when_asked(micro: list[str], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    lines = ['{"q": "1+1=", "a": "2"}', "{oops", '{"q": "2+3="}', '{"q": "4+4=", "a": "8"}']
    benchmark = bad_benchmark(tmp_path, lines)
    overrides = [f"eval.benchmarks=[{benchmark}]", "eval.on_bad_row=skip", "eval.k=2", "eval.pass_k=[1,2]"]
    result = evaluate(compose_config([*micro, *overrides]))[0]
    assert result["problems"] == 2 and result["skipped_rows"] == 2
    assert "bench: skipped 2 malformed rows" in capsys.readouterr().err
