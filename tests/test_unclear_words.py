"""The catalogue of bad inputs (see ``tests/catalogue.py``): messages whose words were unclear, each with its fix applied.

- A damaged cached built-in model: named as the cache, with its fixes (delete it, or ``tsctl warmup --rebuild``);
  ``tsctl warmup`` no longer calls it fine.
- ``tsctl seed`` rerun after a kill between its shard and its checksum: named as a write cut short, as ``tsctl
  rollout`` names it; temp files a killed write left in the shards folder are removed.
- Worked solutions too long for the built-in model: the length said, not a missing ``task.file.solution_field``.
- A second ``tsctl eval`` of the same checkpoint: refused at its start, in the command line's words.
"""

import json
import shutil
from pathlib import Path

import pytest

from catalogue import passes, refused
from conftest import kill, micro_args, tsctl
from tsctl.io.run_lock import RunLock
from tsctl.models.builtin import builtin_dir
from tsctl.runconfig import compose_config

pytestmark = pytest.mark.slow


def damage(model: Path) -> None:
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def test_a_damaged_cached_builtin_model_names_the_cache_and_its_fixes(tmp_path):
    cache = tmp_path / "cache"
    args = [*micro_args(tmp_path / "runs", cache), "trainer.steps=1", "trainer.save_every=1"]
    tsctl("warmup", *args)
    model = builtin_dir(compose_config(args).cfg)
    damage(model)
    words = (f"the cached built-in model {model} is damaged", f"delete that folder (rm -r {model}) and rerun",
             "or rebuild it with `tsctl warmup --rebuild` and the same overrides")
    refused([tmp_path], "train", *args, "name=a", words=words)
    refused([tmp_path], "warmup", *args, words=words)  # warm-up no longer calls it fine
    passes("warmup", *args, "--rebuild", words=("held-out greedy accuracy",))
    passes("train", *args, "name=a", words=("run complete",))
    damage(model)
    shutil.rmtree(model)  # the other fix: deleted
    passes("train", *args, "name=b", words=("building the built-in model", "run complete"))


def test_seed_rerun_after_a_kill_between_shard_and_checksum(tmp_path, model_cache):
    out = tmp_path / "shards"
    seed = [*micro_args(tmp_path / "runs", model_cache), "ratio=25", f"shards.out_dir={out}"]
    tsctl("warmup", *micro_args(tmp_path / "runs", model_cache))
    kill(seed, ("shard-written", 1), command="seed")
    assert (out / "seeds.parquet").is_file() and not (out / "seeds.parquet.sha256").exists()
    cut = (f"{out / 'seeds.parquet'} is a write cut short (its checksum file seeds.parquet.sha256 is missing, so no reader accepts it); "
           "pass shards.overwrite=true to write it again")
    assert refused([tmp_path], "seed", *seed, words=(cut,)).endswith(cut)
    refused([tmp_path], "rollout", *seed, words=("checksum file seeds.parquet.sha256 is missing (the write did not finish)",))
    (out / ".seeds.parquet.x1y2.tmp").write_bytes(b"half a shard")  # a write killed before its rename
    done = passes("seed", *seed, "shards.overwrite=true", words=(f"removed 1 temp file(s) an interrupted write left in {out}",))
    assert "wrote" in done and not list(out.glob(".*.tmp"))
    passes("rollout", *seed, words=("wrote",))


TOO_LONG = "none of the 1 problem(s) with one fits the model's 256 tokens (prompt + solution"


@pytest.mark.parametrize("length, words, fixed", [
    # a row past task.file.max_row_bytes is refused by its size, before it is parsed or tokenized
    (5_000_000, ["train.jsonl line 1: 5000054 bytes", "remove or shorten that row, or raise task.file.max_row_bytes"], []),
    (300, [TOO_LONG, "raise model.tiny.max_position_embeddings to 3", "or more"], ["model.tiny.max_position_embeddings=400"]),
], ids=["5MB", "300-chars"])
def test_solutions_too_long_for_the_builtin_model_say_so(tmp_path, length, words, fixed):
    train, heldout = tmp_path / "train.jsonl", tmp_path / "heldout.jsonl"
    train.write_text(json.dumps({"question": "1+1", "answer": "2", "solution": "1+1=" + "2" * length}) + "\n")
    heldout.write_text("".join(json.dumps({"question": f"{i}+2", "answer": str(i + 2)}) + "\n" for i in range(3)))
    args = [*micro_args(tmp_path / "runs", tmp_path / "cache"), "task=file", f"task.file.train_path={train}", f"task.file.heldout_path={heldout}",
            "task.file.solution_field=solution", "trainer.steps=1", "trainer.save_every=1", "model.warmup.examples=320"]
    proc = tsctl("train", *args, check=False)
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr
    assert "solution_field" not in errors[0]
    for word in words:
        assert word in errors[0], (word, errors[0])
    assert not (tmp_path / "runs" / "default").exists()
    if not fixed:  # the solution shortened
        train.write_text(json.dumps({"question": "1+1", "answer": "2", "solution": "1+1=2"}) + "\n")
    passes("train", *args, *fixed, words=("run complete",))


def test_a_second_eval_of_the_same_checkpoint_is_refused_at_its_start(tmp_path, model_cache):
    args = micro_args(tmp_path / "runs", model_cache)
    tsctl("warmup", *args)
    model = builtin_dir(compose_config(args).cfg)
    results = tmp_path / "runs" / "default" / "eval" / model.name
    results.mkdir(parents=True)
    other = RunLock.acquire(results)  # another tsctl eval writing there
    try:
        line = refused([tmp_path], "eval", *args, f"eval.checkpoint={model}", "eval.limit=4", words=(
            f"eval results in {results} are being written by pid", "(another tsctl eval); wait for it to end, then rerun",
            "(with eval.overwrite=true to replace what it wrote)",
        ))
        assert "overwrite=True" not in line
    finally:
        other.release()  # it ended
    passes("eval", *args, f"eval.checkpoint={model}", "eval.limit=4", words=("heldout",))
    passes("eval", *args, f"eval.checkpoint={model}", "eval.limit=4", "eval.overwrite=true", words=("heldout",))
