"""The README's set-up figures are ``docs/readme_numbers.json``'s, and ``scripts/readme_numbers.py`` records a run truly."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import transformers
from conftest import metrics, micro_args

from tsctl.io.rounding import KEYS

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "readme_numbers.py"
FIELDS = {
    "command", "task", "steps", "prompts_per_step", "samples_per_prompt", "warmup_heldout_accuracy", "warmup_heldout_problems",
    "warmup_seconds", "heldout_problems", "heldout_curve", "final_step", "final_accuracy", "median_step_seconds", "job_seconds",
    "arithmetic", "versions", "revision", "dirty", "date",
}


def load_script() -> ModuleType:
    """``scripts/readme_numbers.py`` as a module."""
    spec = importlib.util.spec_from_file_location("readme_numbers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def flat(text: str) -> str:
    """``text`` with every run of whitespace made one space (the README wraps its lines)."""
    return " ".join(text.split())


def figures(text: str) -> list[str]:
    """Every number written in ``text``, in order (``0.437``, ``2``, ``2.13.0``)."""
    return re.findall(r"\d+(?:\.\d+)*", text)


def setup_paragraph(readme: str) -> str:
    """The paragraph of the README's "Set up and run" section that cites the record, on one line."""
    section = readme[readme.index("## Set up and run") :]
    section = section[: section.index("\n## ", 1)]
    cited = [p for p in section.split("\n\n") if "docs/readme_numbers.json" in p and not p.lstrip().startswith("```")]
    assert len(cited) == 1, "the set-up section should have one paragraph that cites docs/readme_numbers.json"
    return flat(cited[0])


def check_fields(record: dict) -> None:
    """``record`` has the script's fields, and its figures agree with each other."""
    assert set(record) == FIELDS
    assert set(record["arithmetic"]) == set(KEYS) and set(record["versions"]) == {"torch", "transformers"}
    assert record["final_accuracy"] == record["heldout_curve"][str(record["final_step"])]
    assert record["final_step"] == record["steps"] and isinstance(record["dirty"], bool)
    assert re.fullmatch(r"[0-9a-f]{40}", record["revision"]) and re.fullmatch(r"\d{4}-\d\d-\d\d", record["date"])


def test_the_readme_setup_paragraph_states_the_records_figures():
    record_file = ROOT / "docs" / "readme_numbers.json"
    if not record_file.is_file():
        pytest.fail("docs/readme_numbers.json is missing: run `python scripts/readme_numbers.py` on an idle machine and paste the paragraph it prints into README.md")
    record = json.loads(record_file.read_text())
    check_fields(record)
    expected = flat(load_script().readme_paragraph(record))
    paragraph = setup_paragraph((ROOT / "README.md").read_text())
    assert expected in paragraph, f"README.md's set-up paragraph differs from the record; the record's paragraph:\n{expected}"
    assert figures(paragraph) == figures(expected), "the set-up paragraph states a figure the record does not"


def test_the_script_refuses_a_runs_folder_it_does_not_own(tmp_path, capsys):
    script = load_script()
    with pytest.raises(SystemExit) as refused:
        script.main(["--out", str(tmp_path / "r.json"), "--", "runs_dir=/elsewhere"])
    assert refused.value.code == 2 and "use --runs-dir" in capsys.readouterr().err
    (tmp_path / "runs" / "old").mkdir(parents=True)
    with pytest.raises(SystemExit) as refused:
        script.main(["--runs-dir", str(tmp_path / "runs")])
    assert refused.value.code == 2 and "not empty" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_the_script_records_a_micro_run_from_its_own_files(tmp_path, model_cache):
    runs, out = tmp_path / "runs", tmp_path / "record.json"
    overrides = [a for a in micro_args(runs, model_cache) if not a.startswith("runs_dir=")]
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--runs-dir", str(runs), "--", *overrides],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "1000"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line[:5] for line in done.stdout.splitlines() if line.startswith("[")] == ["[1/3]", "[2/3]", "[3/3]"]
    record = json.loads(out.read_text())
    check_fields(record)

    run = runs / "default" / "ratio0-seed0"
    manifest = json.loads((run / "manifest.json").read_text())
    warmup = json.loads((Path(manifest["base_model"]["path"]) / "warmup.json").read_text())
    steps = metrics(run)
    assert record["warmup_heldout_accuracy"] == warmup["heldout_accuracy"] and record["warmup_seconds"] == warmup["train_seconds"]
    assert record["warmup_heldout_problems"] == warmup["heldout_problems"] == 50 and record["heldout_problems"] == 16
    assert record["heldout_curve"] == {str(r["step"]): r["eval/greedy_accuracy"] for r in steps if "eval/greedy_accuracy" in r}
    assert list(record["heldout_curve"]) == ["0", "2", "3"] and record["final_step"] == 3  # trainer=micro evaluates every 2 steps and at the end
    times = [r["time/step"] for r in steps[1:]]
    assert record["median_step_seconds"] == statistics.median(times) > 0
    assert record["job_seconds"] > sum(times)  # the warm-up too where this job built the model (the session's cache may hold it)
    assert (record["task"], record["steps"], record["prompts_per_step"], record["samples_per_prompt"]) == ("arithmetic", 3, 4, 4)
    assert record["arithmetic"] == manifest["arithmetic"] == {"device": "cpu", "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads()}
    assert record["versions"] == {"torch": torch.__version__, "transformers": transformers.__version__}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert record["revision"] == manifest["git_revision"] == head  # the job ran this checkout's code
    assert record["date"] == manifest["created"][:10] and record["command"] == "tsctl train " + " ".join(overrides)
    assert flat(load_script().readme_paragraph(record)) in flat(done.stdout)  # the paragraph to paste
