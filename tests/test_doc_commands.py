"""Every ``tsctl`` command that README.md and docs/*.md show in a fenced block composes as written, and the ones a
newcomer runs first (train, eval, report) run end to end on the micro model.

Composing is ``tsctl <command> ... --cfg job`` in this process: the overrides, groups, presets and launchers are
checked without a GPU, a model hub or the data files a command names (a command under ``torchrun`` or ``exec`` is
composed from what follows ``-m tsctl``). ``tsctl report`` has no ``--cfg``: its ``report.*`` overrides are composed
as the command composes them, and its folder is checked to be one the docs' runs or sweeps would make.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import MICRO_TASK, tsctl

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PLACEHOLDERS = {"<id>": "records", "<run>": "ratio0-seed0"}
"""What stands in for each placeholder of a documented command: ``runs/default/sweep-<id>`` is a sweep folder
(the committed records of one, copied into the test's folder) and ``runs/math/<run>`` a run folder."""

STAND_INS = {"traces.jsonl": '{"prompt_id": "0", "response": "2 + 3 = 5"}\n'}
"""Files a documented command checks when it composes, written into the folder it composes in. The other files the
docs name (a preset's data, a model folder) are read only when a command runs, so they need no stand-in here.
"""

SKIP: dict[str, str] = {}
"""Documented commands that cannot be composed here, each with the reason (keep it short)."""

END_TO_END = [
    ("README.md", "tsctl train"),
    ("README.md", "tsctl eval eval.checkpoint=runs/default/ratio0-seed0 eval.step=all"),
    ("README.md", "tsctl report runs/default/sweep-<id>"),
]
"""The commands run end to end, in this order, in one folder, with the micro overrides (:func:`micro`) added to
every command but ``report``: the README's main job, its evaluation and a report of a sweep. A report costs
about the same whatever the sweep, so the docs' other reports (``report.baseline=...``) are composed only."""

RECORDS = ROOT / "docs" / "results" / "countdown-ratio" / "runs"
"""The committed run records that stand for ``runs/default/sweep-<id>``: the points ``ratio=0`` and ``ratio=25``."""


def fenced_lines(text: str) -> list[str]:
    """The lines of ``text``'s ```` ```bash ````, ```` ```sh ```` and plain ```` ``` ```` blocks, backslash
    continuations joined."""
    blocks = re.findall(r"^```(?:bash|sh)?\n(.*?)^```", text, re.S | re.M)
    return [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]


def tsctl_args(line: str) -> list[str] | None:
    """The arguments after ``tsctl`` of a command line (``tsctl ...``, or ``... -m tsctl ...`` under ``torchrun``
    or ``exec``), without its comment; None for a line that runs no ``tsctl`` command."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if words[:1] == ["tsctl"]:
        return words[1:]
    for i in range(len(words) - 1):
        if words[i : i + 2] == ["-m", "tsctl"] and words[0] in ("torchrun", "exec"):
            return words[i + 2 :]
    return None


def doc_commands() -> list[tuple[str, str]]:
    """Every documented ``tsctl`` command line: (its file relative to the checkout, the line)."""
    found = []
    for doc in DOCS:
        for line in fenced_lines(doc.read_text()):
            if tsctl_args(line) is not None:
                found.append((doc.relative_to(ROOT).as_posix(), line))
    return found


def filled(args: list[str]) -> list[str]:
    """``args`` with every placeholder replaced (:data:`PLACEHOLDERS`); a placeholder left is an error."""
    out = []
    for arg in args:
        for placeholder, value in PLACEHOLDERS.items():
            arg = arg.replace(placeholder, value)
        assert not re.search(r"<[a-z_ -]+>", arg), f"{arg!r} holds a placeholder with no entry in PLACEHOLDERS"
        out.append(arg)
    return out


COMMANDS = doc_commands()


def test_the_docs_show_commands_of_every_kind():
    commands = {tsctl_args(line)[0] for _, line in COMMANDS}
    assert commands == {"warmup", "train", "seed", "rollout", "eval", "ablate", "report"}
    assert set(END_TO_END) <= {(doc, " ".join(shlex.split(line, comments=True))) for doc, line in COMMANDS}
    assert set(SKIP) <= {line for _, line in COMMANDS}, "SKIP names a command the docs no longer show"


@pytest.mark.parametrize(("doc", "line"), COMMANDS, ids=[f"{d}: {l[:70]}" for d, l in COMMANDS])
def test_a_documented_command_composes(doc, line, tmp_path, monkeypatch):
    if line in SKIP:
        pytest.skip(SKIP[line])
    monkeypatch.chdir(tmp_path)  # relative paths (runs/, data/...) resolve here, never in the checkout
    for name, text in STAND_INS.items():
        (tmp_path / name).write_text(text)
    command, *args = filled(tsctl_args(line))
    if command == "report":
        from tsctl.cli import quote_baseline
        from tsctl.runconfig import compose_config

        folder, *overrides = args
        assert re.fullmatch(r"runs/[\w.-]+/[\w.=-]+", folder), f"{folder} is not a run or sweep folder under runs/"
        compose_config(quote_baseline(overrides), idle=True, command="report")
        return
    from tsctl.cli import app

    result = CliRunner().invoke(app, [command, *args, *([] if "--cfg" in args else ["--cfg", "job"])], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, f"{doc}: {line}\n{result.output}"
    assert "runs_dir:" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(STAND_INS), "composing a command wrote files"


def micro(model_cache: Path) -> list[str]:
    """The overrides that make a documented command a seconds-long run in the current folder."""
    return [f"model.cache_dir={model_cache}", "model=micro", "trainer=micro", *MICRO_TASK, "engine.max_new_tokens=24"]


@pytest.mark.slow
def test_a_newcomer_s_commands_run_end_to_end(tmp_path, model_cache, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the commands as a newcomer types them, in a folder of their own
    sweep = tmp_path / "runs" / "default" / "sweep-records"
    sweep.mkdir(parents=True)
    for point in ("ratio=0-seed=0", "ratio=0-seed=1", "ratio=25-seed=0", "ratio=25-seed=1"):
        shutil.copytree(RECORDS / point, sweep / point)
    for _, line in END_TO_END:
        command, *args = filled(tsctl_args(line))
        tsctl(command, *args, *(micro(model_cache) if command != "report" else []))

    run = tmp_path / "runs" / "default" / "ratio0-seed0"  # where the README says the main job's run lands
    assert all((run / name).exists() for name in ("metrics.jsonl", "checkpoints", "config.yaml", "manifest.json"))
    assert list(run.glob("eval/step-*/heldout.json"))
    assert (sweep / "report" / "summary.md").is_file() and (sweep / "report" / "comparisons.csv").is_file()
