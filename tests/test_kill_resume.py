"""Kill and resume: SIGKILL at seeded random points of ``tsctl train ratio=25``, and damaged seed windows.

Every killed run, resumed with ``resume=true`` (and maybe killed again), must end exactly as an
uninterrupted run: the same metrics bit for bit (``time/*`` and ``*_tokens_per_s`` aside), the same
seed shards and final weights byte for byte, status ``completed`` and no temp file left. The kill
points come from the ``TSCTL_KILL_AT`` seam (:mod:`tsctl.io.faults`).
"""

import json
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import kill, reference_run, stable_metrics, tsctl
from tsctl.cli import app
from tsctl.io.checkpoints import STATE_FILE
from tsctl.io.run_lock import LOCK_FILE
from tsctl.seeds.bank import SeedBank
from tsctl.runconfig import compose_config
from tsctl.analysis.points import load_run

SETTINGS = ["ratio=25", "refresh=2", "trainer.steps=4", "trainer.save_every=3", "trainer.keep_checkpoints=1"]
"""Seed windows 0..1 and 2..3; checkpoints at 2 (a window's first step), 3 (save_every) and 4 (the
last); keep_checkpoints=1, so step-2 survives only because its window is open."""

HITS = {"shard-written": 2, "checkpoint-partial": 3, "step-logged": 4}
"""Passages through each kill point in one uninterrupted run with SETTINGS."""



def draw_trials(seed: int = 14, count: int = 3) -> list[tuple[tuple[str, int], tuple[str, int] | None]]:
    """Kill points drawn with ``seed``: one between a seed shard and its checksum, one inside a
    checkpoint write, the rest from every passage of every point; each maybe followed by a second
    kill of the resumed process (at a point every resume reaches)."""
    rng = random.Random(seed)
    every = [(point, n) for point, hits in HITS.items() for n in range(1, hits + 1)]
    first = [(point, rng.randint(1, HITS[point])) for point in ("shard-written", "checkpoint-partial")]
    kills = first + rng.sample([k for k in every if k not in first], count - len(first))
    return [(kill, rng.choice([None, ("step-logged", 1), ("checkpoint-partial", 1)])) for kill in kills]


TRIALS = draw_trials()


def label(kill: tuple[str, int], again: tuple[str, int] | None) -> str:
    return f"{kill[0]}-{kill[1]}" + (f"+{again[0]}-{again[1]}" if again else "")


def assert_same_as(reference: Path, run: Path) -> None:
    """``run`` ended exactly as ``reference``: metrics, seed shards, final weights; completed, no temp files."""
    assert stable_metrics(run) == stable_metrics(reference)
    for shard in sorted((reference / "seeds").iterdir()):
        assert (run / "seeds" / shard.name).read_bytes() == shard.read_bytes(), shard.name
    final = Path("checkpoints") / "step-4" / "model.safetensors"
    assert (run / final).read_bytes() == (reference / final).read_bytes()
    assert json.loads((run / "manifest.json").read_text())["status"] == "completed"
    assert [p for p in run.rglob("*.tmp")] == []


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> tuple[Path, list[str]]:
    """An uninterrupted run with SETTINGS, and the overrides that place more runs beside it."""
    run, args = reference_run(tmp_path_factory.mktemp("kill") / "runs", model_cache, SETTINGS)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-4"]  # step-2 went when its window closed
    return run, args


@pytest.mark.slow
@pytest.mark.parametrize("kill_at, again", TRIALS, ids=[label(*t) for t in TRIALS])
def test_a_run_killed_at_random_points_resumes_to_the_same_result(reference, kill_at, again):
    ref, args = reference
    run = ref.parent / label(kill_at, again)
    args = [*args, f"name={run.name}"]
    kill(args, kill_at)
    if kill_at[0] == "shard-written":  # the shard is in place, its checksum is not
        shard = run / "seeds" / f"step-{2 * (kill_at[1] - 1):06d}.parquet"
        assert shard.is_file() and not shard.with_name(shard.name + ".sha256").exists()
    if kill_at[0] == "checkpoint-partial":  # a half-written checkpoint in its temp folder
        assert list((run / "checkpoints").glob(".step-*.tmp"))
    assert load_run(run).status == "interrupted"
    if again:
        kill([*args, "resume=true"], again)
    tsctl("train", *args, "resume=true")
    assert_same_as(ref, run)


def steps_threads(run: Path) -> set:
    """The ``torch_threads`` of every training step's record."""
    return {r["torch_threads"] for r in stable_metrics(run) if r["step"] >= 1}


@pytest.fixture(scope="module")
def one_thread(reference) -> Path:
    """The reference run trained at one torch thread."""
    ref, args = reference
    tsctl("train", *args, "name=one-thread", OMP_NUM_THREADS="1")
    assert steps_threads(ref.parent / "one-thread") == {1}
    return ref.parent / "one-thread"


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [("step-logged", 3), ("shard-written", 1)], ids=["after-a-checkpoint", "before-any-checkpoint"])
def test_a_run_resumed_by_a_process_with_other_threads_takes_the_threads_it_started_with(reference, one_thread, kill_at):
    ref, args = reference
    run = ref.parent / f"threads-{kill_at[0]}"
    args = [*args, f"name={run.name}"]
    kill(args, kill_at, OMP_NUM_THREADS="1")  # shard-written 1: no checkpoint yet; the resume starts at step 0 and reuses the shard
    assert json.loads((run / "manifest.json").read_text())["arithmetic"]["torch_threads"] == 1
    done = tsctl("train", *args, "resume=true", OMP_NUM_THREADS="2")
    assert "resuming at 1 torch thread(s) as the run started (this process had 2)" in done.stdout + done.stderr
    assert json.loads((run / "manifest.json").read_text())["arithmetic"]["torch_threads"] == 1  # as it started
    assert steps_threads(run) == {1}  # every step, those before the kill and those after
    assert_same_as(one_thread, run)


@pytest.fixture(scope="module")
def inside_window(reference) -> Path:
    """A run killed after step 4's metrics: its newest checkpoint is step-3, inside the window that step-2 opened."""
    ref, args = reference
    run = ref.parent / "inside-window"
    kill([*args, f"name={run.name}"], ("step-logged", 4))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2", "step-3"]  # keep_checkpoints=1 spared step-2
    return run


def damage(shard: Path, how: str) -> None:
    if how == "truncated":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif how == "corrupted":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif how == "checksum lost":
        shard.with_name(shard.name + ".sha256").unlink()
    else:
        shard.unlink()
        shard.with_name(shard.name + ".sha256").unlink()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncated", "corrupted", "checksum lost", "missing"])
def test_a_damaged_window_is_written_again_from_the_checkpoint_that_wrote_it(reference, inside_window, how):
    ref, args = reference
    run = ref.parent / f"damaged-{how.replace(' ', '-')}"
    shutil.copytree(inside_window, run)
    damage(run / "seeds" / "step-000002.parquet", how)
    (run / "seeds" / ".step-000002.parquet.x1.tmp").write_bytes(b"left by a killed writer")
    result = CliRunner().invoke(app, ["train", *args, f"name={run.name}", "resume=true"])
    assert result.exit_code == 0, result.output
    assert_same_as(ref, run)


@pytest.mark.slow
def test_a_damaged_window_whose_checkpoint_is_gone_says_what_to_do(reference, inside_window):
    ref, args = reference
    run = ref.parent / "damaged-no-checkpoint"
    shutil.copytree(inside_window, run)
    damage(run / "seeds" / "step-000002.parquet", "truncated")
    shutil.rmtree(run / "checkpoints" / "step-2")

    def files() -> dict[Path, bytes]:
        """The run's files and their bytes, but the lock file, which names whoever held the lock last."""
        return {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != LOCK_FILE}

    before = files()
    result = CliRunner().invoke(app, ["train", *args, f"name={run.name}", "resume=true"])
    lines = result.output.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output
    assert "checkpoint step-2, the behaviour policy that wrote it, is gone" in lines[0]
    assert f"start the run anew: delete {run} or pass another name=..." in lines[0]
    assert files() == before


def test_the_fix_for_a_lost_window_names_the_checkpoints_to_delete(tmp_path):
    cfg = compose_config(["ratio=25", "refresh=5", "trainer.steps=20"]).cfg
    for step in (3, 10, 12):
        folder = tmp_path / "checkpoints" / f"step-{step}"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / STATE_FILE).write_bytes(b"")
    bank = SeedBank(tmp_path / "seeds", cfg, None, None, [], tmp_path / "checkpoints", "base")
    text = bank._lost(bank.path(5), 5, 10)
    assert "seed shard of steps 5..9" in text and f"delete checkpoints step-10, step-12 in {tmp_path / 'checkpoints'}" in text
    assert bank.keep(12) == {10} and bank.keep(9) == {5} and bank.keep(3) == set() and bank.keep(20) == set()
    assert [s for s in range(21) if bank.opens_window(s)] == [5, 10, 15]
