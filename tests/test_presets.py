"""The paper-like presets (conf/preset/): each validates with no GPU, says what hardware it needs, and is DAPO."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import tsctl
from tsctl.config.errors import ConfigError
from tsctl.config.store import conf_dir
from tsctl.runconfig import compose_config
from tsctl.tasks.benchmarks import available_benchmarks

PRESETS = sorted(p.stem for p in (conf_dir() / "preset").glob("*.yaml"))
PRESET_DOC = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"


def test_there_are_presets_for_both_model_sizes():
    assert PRESETS == ["qwen2.5-math-1.5b", "qwen2.5-math-7b"]


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_cfg_job_validates_a_preset_without_a_gpu(preset, tmp_path):
    data = tmp_path / "dapo_math.jsonl"
    printed = tsctl("train", f"+preset={preset}", f"task.file.train_path={data}", "--cfg", "job").stdout
    assert "name: vllm" in printed and f"train_path: {data}" in printed and "Qwen/Qwen2.5-Math-" in printed


@pytest.mark.slow
def test_cli_refuses_a_preset_without_its_data_file_in_one_line():
    missing = tsctl("train", f"+preset={PRESETS[0]}", "--cfg", "job", check=False)
    output = missing.stdout + missing.stderr
    assert missing.returncode == 2 and "task.file.train_path" in output and "Traceback" not in output


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_are_dapo_on_qwen_math_with_the_six_benchmarks(preset):
    cfg = compose_config([f"+preset={preset}", "task.file.train_path=data.jsonl"]).cfg
    assert cfg.model.path == f"Qwen/Qwen2.5-Math-{preset.rsplit('-', 1)[1].upper()}" and cfg.model.dtype == "float32"
    al, tr, e = cfg.algo, cfg.trainer, cfg.engine
    assert (al.aggregation, al.clip_low, al.clip_high, al.kl_coef, al.overlong, al.dynamic_sampling) == ("dapo", 0.2, 0.28, 0.0, "penalty", True)
    assert (tr.lr, tr.batch_size, tr.n, tr.batch_size * tr.n // tr.mini_batches) == (1e-6, 512, 16, 512)
    assert (e.name, e.vllm.dtype, e.vllm.enable_sleep_mode, e.temperature) == ("vllm", "bfloat16", True, 1.0)
    assert e.max_new_tokens + 512 <= e.vllm.max_model_len == 4096  # room for the prompt in Qwen2.5-Math's 4k context
    assert (cfg.task.name, cfg.task.file.question_field, cfg.task.file.answer_field) == ("file", "problem", "answer")
    assert sorted(cfg.eval.benchmarks) == sorted(available_benchmarks()) and len(cfg.eval.benchmarks) == 6
    overridden = compose_config([f"+preset={preset}", "task.file.train_path=data.jsonl", "trainer.n=8", "ratio=25"]).cfg
    assert (overridden.trainer.n, overridden.ratio) == (8, 25)


@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_states_its_gpus_and_memory_in_the_file_and_the_docs(preset):
    text = (conf_dir() / "preset" / f"{preset}.yaml").read_text()
    assert "# Needs: one NVIDIA" in text and " GB" in text and "GPU memory" in text
    doc = PRESET_DOC.read_text()
    assert f"+preset={preset}" in doc
    line = next(line for line in doc.splitlines() if f"`{preset}`" in line)
    assert "GB" in line


def test_a_preset_without_its_data_file_names_the_key():
    with pytest.raises(ConfigError, match="task.file.train_path"):
        compose_config(["+preset=qwen2.5-math-1.5b"])
