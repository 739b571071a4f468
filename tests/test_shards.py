"""Shards: exact round trips, atomic writes, and every untrustworthy file rejected with a clear error."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from tsctl.io import shards
from tsctl.io.shards import ShardError, checksum_path, read_shard, write_shard


def seed_columns(rows: int = 3) -> dict[str, list]:
    """A small valid seed shard with large token ids and awkward float values."""
    rng = np.random.default_rng(0)
    lengths = [int(n) for n in rng.integers(0, 12, size=rows)]
    return {
        "prompt_id": [f"p{i}" for i in range(rows)],
        "prompt_ids": [rng.integers(0, 2**31 - 1, size=4).tolist() for _ in range(rows)],
        "response_ids": [rng.integers(0, 150_000, size=n).tolist() for n in lengths],
        "logprobs": [(-rng.exponential(size=n)).tolist() for n in lengths],
        "entropies": [rng.random(n).astype(np.float32) for n in lengths],
        "checkpoint": ["checkpoints/step-10"] * rows,
        "checkpoint_step": [10 + 2**40] * rows,
        "cut": [n // 2 for n in lengths],
        "finished": [i % 2 == 0 for i in range(rows)],
        "span": lengths,
        "behaviour_reward": [float(i % 2) for i in range(rows)],
        "predicted": [None if i % 2 else 0.25 for i in range(rows)],
    }


def rollout_columns() -> dict[str, list]:
    """A valid two-row rollout shard: one seeded sample, one plain."""
    return {
        "group": [0, 0],
        "prompt_id": ["p0", "p0"],
        "prompt_ids": [[1, 2], [1, 2]],
        "response_ids": [[5, 6, 7, 0], [8, 0]],
        "prefix_len": [2, 0],
        "logprobs": [[-0.1, -0.2, -0.3, -0.4], [-1.5, -0.01]],
        "behaviour_checkpoint": ["checkpoints/step-10", ""],
        "behaviour_step": [10, -1],
        "policy_step": [14, 14],
        "reward": [1.0, 0.0],
        "advantage": [0.7071, -0.7071],
        "finished": [True, True],
    }


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    return write_shard(tmp_path / "seeds-000.parquet", "seed", seed_columns(), {"step": "10"})


def test_seed_round_trip_is_exact(shard: Path) -> None:
    cols = seed_columns()
    got = read_shard(shard, "seed")
    assert got.metadata == {"step": "10"}
    assert got.table.schema.names == list(cols)
    table = got.table.to_pydict()
    for name in ("prompt_id", "prompt_ids", "response_ids", "checkpoint", "checkpoint_step", "cut", "finished"):
        assert table[name] == cols[name]
    for name in ("logprobs", "entropies"):
        for got, want in zip(table[name], cols[name]):
            np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_rollout_round_trip(tmp_path: Path) -> None:
    path = write_shard(tmp_path / "r.parquet", "rollout", rollout_columns())
    table = read_shard(path, "rollout").table.to_pydict()
    assert table["response_ids"] == [[5, 6, 7, 0], [8, 0]]
    assert table["prefix_len"] == [2, 0]
    assert table["advantage"] == [float(np.float32(0.7071)), float(np.float32(-0.7071))]


def test_empty_shard_round_trips(tmp_path: Path) -> None:
    path = write_shard(tmp_path / "e.parquet", "seed", seed_columns(rows=0))
    assert read_shard(path, "seed").table.num_rows == 0


def test_checksum_file_is_sha256sum_format(shard: Path) -> None:
    digest = hashlib.sha256(shard.read_bytes()).hexdigest()
    assert checksum_path(shard).read_text() == f"{digest}  {shard.name}\n"


@pytest.mark.parametrize(
    "size", [lambda n: n // 2, lambda n: n - 1, lambda n: n - 4, lambda n: 0], ids=["half", "-1", "-4", "empty"]
)
def test_truncated_file_rejected(shard: Path, size) -> None:
    data = shard.read_bytes()
    shard.write_bytes(data[: size(len(data))])
    with pytest.raises(ShardError, match=r"seeds-000.parquet: truncated .*re-run `tsctl seed`"):
        read_shard(shard, "seed")


def test_truncation_inside_the_footer_is_caught_by_the_checksum(shard: Path) -> None:
    data = shard.read_bytes()
    shard.write_bytes(data[:-12] + data[-4:])  # drop bytes just before the magic, keep the magic
    with pytest.raises(ShardError, match="checksum mismatch"):
        read_shard(shard, "seed")


def test_every_corrupted_byte_rejected(shard: Path) -> None:
    data = shard.read_bytes()
    for pos in range(0, len(data), max(1, len(data) // 64)):
        corrupted = bytearray(data)
        corrupted[pos] ^= 0x01
        shard.write_bytes(bytes(corrupted))
        with pytest.raises(ShardError, match="truncated|checksum mismatch"):
            read_shard(shard, "seed")


def test_missing_or_malformed_checksum_rejected(shard: Path) -> None:
    checksum = checksum_path(shard)
    checksum.write_text(checksum.read_text().replace(shard.name, "other.parquet"))
    with pytest.raises(ShardError, match="belongs to 'other.parquet'"):
        read_shard(shard, "seed")
    checksum.write_text("not a checksum\n")
    with pytest.raises(ShardError, match="malformed"):
        read_shard(shard, "seed")
    checksum.unlink()
    with pytest.raises(ShardError, match="checksum file seeds-000.parquet.sha256 is missing"):
        read_shard(shard, "seed")


def test_missing_shard_names_the_producer(tmp_path: Path) -> None:
    with pytest.raises(ShardError, match=r"not found; run `tsctl rollout`"):
        read_shard(tmp_path / "nope.parquet", "rollout")


def test_wrong_kind_rejected(tmp_path: Path) -> None:
    path = write_shard(tmp_path / "r.parquet", "rollout", rollout_columns())
    with pytest.raises(ShardError, match="holds 'rollout' rows where 'seed' was expected"):
        read_shard(path, "seed")


def test_wrong_version_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = shards.SEED.version
    future = dataclasses.replace(shards.SEED, version=now + 1)
    monkeypatch.setattr(shards, "KINDS", {**shards.KINDS, "seed": future})
    path = write_shard(tmp_path / "s.parquet", "seed", seed_columns())
    monkeypatch.undo()
    with pytest.raises(ShardError, match=rf"schema version {now + 1} where {now} is expected.*re-run `tsctl seed`"):
        read_shard(path, "seed")


def test_changed_columns_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cols = seed_columns()
    del cols["entropies"]
    narrower = dataclasses.replace(shards.SEED, schema=shards.SEED.schema.remove(4), aligned=("logprobs",))
    monkeypatch.setattr(shards, "KINDS", {**shards.KINDS, "seed": narrower})
    path = write_shard(tmp_path / "s.parquet", "seed", cols)
    monkeypatch.undo()
    with pytest.raises(ShardError, match="missing column\\(s\\) entropies"):
        read_shard(path, "seed")


def test_refuses_to_overwrite(shard: Path) -> None:
    before = shard.read_bytes()
    with pytest.raises(ShardError, match="already exists.*overwrite=True"):
        write_shard(shard, "seed", seed_columns(rows=1))
    assert shard.read_bytes() == before
    write_shard(shard, "seed", seed_columns(rows=1), overwrite=True)
    assert read_shard(shard, "seed").table.num_rows == 1


def test_failed_write_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(shards.os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        write_shard(tmp_path / "s.parquet", "seed", seed_columns())
    assert list(tmp_path.iterdir()) == []


def test_failed_overwrite_keeps_the_old_shard(shard: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = read_shard(shard, "seed").table
    monkeypatch.setattr(shards.os, "replace", lambda src, dst: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(OSError, match="killed"):
        write_shard(shard, "seed", seed_columns(rows=1), overwrite=True)
    monkeypatch.undo()
    assert sorted(p.name for p in shard.parent.iterdir()) == [shard.name, checksum_path(shard).name]
    assert read_shard(shard, "seed").table.equals(before)


def test_crash_before_the_checksum_leaves_a_rejected_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_replace = os.replace

    def replace_shard_only(src: str, dst: str | Path) -> None:
        if str(dst).endswith(".sha256"):
            raise OSError("killed")
        real_replace(src, dst)

    monkeypatch.setattr(shards.os, "replace", replace_shard_only)
    path = tmp_path / "s.parquet"
    with pytest.raises(OSError, match="killed"):
        write_shard(path, "seed", seed_columns())
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["s.parquet"]
    with pytest.raises(ShardError, match="missing \\(the write did not finish\\)"):
        read_shard(path, "seed")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.pop("cut"), "missing cut; unknown none"),
        (lambda c: c.update(extra=[1, 2, 3]), "missing none; unknown extra"),
        (lambda c: c.update(cut=[1, 2]), "different row counts"),
        (lambda c: c.update(logprobs=[[0.0]] * 3), "'logprobs' must have one value per response token"),
        (lambda c: c.update(prompt_ids=[[1, None], [2], [3]]), "'prompt_ids' contains 1 null"),
        (lambda c: c.update(prompt_ids=[[2**40], [2], [3]]), "'prompt_ids' \\(list<item: int32>\\)"),
    ],
)
def test_bad_columns_rejected_on_write(tmp_path: Path, change, message: str) -> None:
    cols = seed_columns()
    change(cols)
    with pytest.raises(ValueError, match=message):
        write_shard(tmp_path / "s.parquet", "seed", cols)
    assert list(tmp_path.iterdir()) == []


def test_bad_kind_and_metadata_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown shard kind 'seeds'; valid kinds: eval, rollout, seed"):
        write_shard(tmp_path / "s.parquet", "seeds", seed_columns())
    with pytest.raises(ValueError, match="reserved prefix"):
        write_shard(tmp_path / "s.parquet", "seed", seed_columns(), {"tsctl.kind": "x"})
