"""Parquet shards shared by the stages: seed responses, rollouts and eval samples, written atomically, read strictly.

A shard is one Parquet file (token ids and log-probs as list columns) plus a checksum file
``<name>.sha256`` beside it, in ``sha256sum`` format (``sha256sum -c`` verifies it by hand).

Writing: the table is serialised in memory, hashed, written to a hidden temp file in the same
folder, fsynced and renamed over the target with ``os.replace``; then the checksum file is written
the same way. A write that dies part-way leaves the previous state (no shard, or the old shard
intact), a shard without its checksum file, or (when overwriting) a new shard beside the old
checksum; the reader rejects the last two. A failed write removes its temp file.

Reading validates, in order: the Parquet magic at both ends (a truncated file fails here), the
checksum file exists, the SHA-256 of the whole file matches it (any changed, missing or extra byte
fails here), then the shard's kind, its schema version (both in the Parquet key-value metadata),
and its column names and types. The bytes that were hashed are the bytes that are parsed, so a
file replaced during the read fails the checksum instead of mixing two versions. Every failure is
a :class:`ShardError` naming the file, the problem and the fix.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tsctl.io import atomic, faults

_MAGIC = b"PAR1"
_KIND_KEY = "tsctl.kind"
_VERSION_KEY = "tsctl.schema_version"
_RESERVED_PREFIX = "tsctl."

_ids = pa.list_(pa.int32())
_floats = pa.list_(pa.float32())


class ShardError(ValueError):
    """A shard file that cannot be trusted (missing, truncated, corrupted, wrong kind or version).

    Also raised when a write would replace an existing shard without ``overwrite=True``.
    """


@dataclass(frozen=True)
class ShardKind:
    """The column schema of one kind of shard.

    Attributes:
        name: the kind, stored in every shard's metadata and checked on read.
        version: schema version; bump it whenever ``schema`` changes.
        schema: column names and types, in order.
        aligned: list columns whose length must equal ``response_ids``'s in every row.
        producer: the command that writes this kind (named in error messages as the fix).
        nullable: columns whose rows may hold null (no value); every other column holds a value in every row.
    """

    name: str
    version: int
    schema: pa.Schema
    aligned: tuple[str, ...]
    producer: str
    nullable: tuple[str, ...] = ()


SEED = ShardKind(
    name="seed",
    version=2,
    schema=pa.schema(
        [
            ("prompt_id", pa.string()),
            ("prompt_ids", _ids),
            ("response_ids", _ids),  # full behaviour response, EOS included when finished
            ("logprobs", _floats),  # pi_b log-prob of each response token (teacher-forced fp32 forward)
            ("entropies", _floats),  # pi_b entropy at each response token
            ("checkpoint", pa.string()),  # the behaviour checkpoint (folder or name)
            ("checkpoint_step", pa.int64()),  # training step of that checkpoint
            ("cut", pa.int32()),  # the seed prefix is response_ids[:cut]
            ("finished", pa.bool_()),  # the response ended with EOS
            ("span", pa.int32()),  # the longest cut allowed (tokens before EOS, less the answer line when excluded)
            ("behaviour_reward", pa.float32()),  # the task's grade of the whole behaviour response
            ("predicted", pa.float32()),  # the seed controller's predicted success of the seeded sample; null: not placed by it
        ]
    ),
    aligned=("logprobs", "entropies"),
    producer="tsctl seed",
    nullable=("predicted",),
)

ROLLOUT = ShardKind(
    name="rollout",
    version=1,
    schema=pa.schema(
        [
            ("group", pa.int32()),  # index of the prompt within its step (the GRPO group)
            ("prompt_id", pa.string()),
            ("prompt_ids", _ids),
            ("response_ids", _ids),  # prefix + suffix, EOS included when finished
            ("prefix_len", pa.int32()),  # tokens [0, prefix_len) come from pi_b; 0 = plain sample
            ("logprobs", _floats),  # log-prob under the policy that generated each token
            ("behaviour_checkpoint", pa.string()),  # source of the prefix tokens; "" for a plain sample
            ("behaviour_step", pa.int64()),  # training step of that checkpoint; -1 for a plain sample
            ("policy_step", pa.int64()),  # training step of pi_old, which generated the rest
            ("reward", pa.float32()),
            ("advantage", pa.float32()),
            ("finished", pa.bool_()),  # the response ended with EOS
        ]
    ),
    aligned=("logprobs",),
    producer="tsctl rollout",
)

EVAL = ShardKind(
    name="eval",
    version=1,
    schema=pa.schema(
        [
            ("problem_id", pa.string()),
            ("sample", pa.int32()),  # index among the problem's sampled responses; 0 for the greedy one
            ("greedy", pa.bool_()),  # the temperature-0 response (else a sampled one)
            ("response", pa.string()),  # decoded text, special tokens dropped
            ("response_ids", _ids),  # generated token ids, EOS included when finished
            ("tokens", pa.int32()),  # len(response_ids)
            ("finished", pa.bool_()),  # the response ended with EOS (else cut at max_new_tokens)
            ("reward", pa.float32()),  # the benchmark's grade of the response
        ]
    ),
    aligned=(),
    producer="tsctl eval",
)

KINDS: Mapping[str, ShardKind] = MappingProxyType({k.name: k for k in (SEED, ROLLOUT, EVAL)})
"""Every shard kind, by name."""


@dataclass(frozen=True)
class Shard:
    """A shard read back: its rows and the metadata given at write time.

    Attributes:
        table: the rows, with exactly the kind's columns.
        metadata: the ``metadata`` passed to :func:`write_shard`.
    """

    table: pa.Table
    metadata: dict[str, str]


def checksum_path(path: str | os.PathLike[str]) -> Path:
    """The checksum file that belongs to the shard at ``path`` (``<name>.sha256``)."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def write_shard(
    path: str | os.PathLike[str],
    kind: str,
    columns: Mapping[str, Any],
    metadata: Mapping[str, str] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write one shard atomically and return its path.

    Args:
        path: the ``.parquet`` file to create; its folder must exist.
        kind: a name in :data:`KINDS`.
        columns: exactly the kind's columns, each a sequence with one value per row (lists of
            token ids for list columns); floats are stored as float32.
        metadata: free-form string pairs kept with the shard (keys must not start with ``tsctl.``).
        overwrite: replace an existing shard; without it an existing shard raises ShardError.
    """
    spec = _kind(kind)
    path = Path(path)
    checksum = checksum_path(path)
    if not overwrite and (path.exists() or checksum.exists()):
        raise ShardError(
            f"{path}: shard already exists; delete it (and {checksum.name}) or pass overwrite=True"
        )
    table = _build_table(spec, columns, dict(metadata or {}))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    atomic.write_bytes(path, memoryview(data))
    faults.hit("shard-written")
    atomic.write_bytes(checksum, f"{digest}  {path.name}\n".encode())
    return path


def read_shard(path: str | os.PathLike[str], kind: str) -> Shard:
    """Read and validate one shard of ``kind``; raises ShardError if it cannot be trusted."""
    spec = _kind(kind)
    path = Path(path)
    fix = f"delete it and {checksum_path(path).name} beside it, then re-run `{spec.producer}`"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ShardError(f"{path}: shard not found; run `{spec.producer}` first") from None
    if len(data) < 2 * len(_MAGIC) or not (data.startswith(_MAGIC) and data.endswith(_MAGIC)):
        raise ShardError(f"{path}: truncated or not a Parquet file (no Parquet magic at both ends); {fix}")
    expected = _read_checksum(path, fix)
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise ShardError(
            f"{path}: checksum mismatch (sha256 {actual}, {checksum_path(path).name} says {expected}); "
            f"the file is corrupted, was changed after writing, or an overwrite did not finish; {fix}"
        )
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as err:
        raise ShardError(f"{path}: unreadable Parquet ({err}); {fix}") from err
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    found_kind = metadata.pop(_KIND_KEY, None)
    if found_kind != spec.name:
        raise ShardError(
            f"{path}: holds {found_kind!r} rows where {spec.name!r} was expected; read it as its own kind"
        )
    found_version = metadata.pop(_VERSION_KEY, None)
    if found_version != str(spec.version):
        raise ShardError(
            f"{path}: {spec.name} shard has schema version {found_version} where {spec.version} is expected "
            f"(written by another tsctl version); {fix}"
        )
    _check_columns(path, spec, table.schema, fix)
    return Shard(table=table.replace_schema_metadata(None), metadata=metadata)


def _kind(kind: str) -> ShardKind:
    """The spec of ``kind``, or ValueError listing the known kinds."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown shard kind {kind!r}; valid kinds: {', '.join(sorted(KINDS))}") from None


def _build_table(spec: ShardKind, columns: Mapping[str, Any], metadata: dict[str, str]) -> pa.Table:
    """The kind's table from ``columns``, with kind, version and ``metadata`` in the schema metadata."""
    expected = set(spec.schema.names)
    if set(columns) != expected:
        missing = ", ".join(sorted(expected - set(columns))) or "none"
        unknown = ", ".join(sorted(set(columns) - expected)) or "none"
        raise ValueError(f"{spec.name} shard columns: missing {missing}; unknown {unknown}")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"shard metadata must map str to str, got {key!r}: {value!r}")
        if key.startswith(_RESERVED_PREFIX):
            raise ValueError(f"shard metadata key {key!r} uses the reserved prefix {_RESERVED_PREFIX!r}")
    arrays = []
    for field in spec.schema:
        try:
            array = pa.array(columns[field.name], type=field.type)
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise ValueError(f"{spec.name} shard column {field.name!r} ({field.type}): {err}") from err
        nulls = array.null_count
        if pa.types.is_list(field.type):
            nulls += pc.list_flatten(array).null_count
        if nulls and field.name not in spec.nullable:
            raise ValueError(f"{spec.name} shard column {field.name!r} contains {nulls} null value(s)")
        arrays.append(array)
    if len({len(a) for a in arrays}) > 1:
        lengths = ", ".join(f"{f.name}={len(a)}" for f, a in zip(spec.schema, arrays))
        raise ValueError(f"{spec.name} shard columns have different row counts: {lengths}")
    table = pa.Table.from_arrays(arrays, schema=spec.schema)
    response_len = pc.list_value_length(table["response_ids"])
    for name in spec.aligned:
        if not pc.list_value_length(table[name]).equals(response_len):
            raise ValueError(
                f"{spec.name} shard column {name!r} must have one value per response token in every row"
            )
    return table.replace_schema_metadata({_KIND_KEY: spec.name, _VERSION_KEY: str(spec.version), **metadata})


def _check_columns(path: Path, spec: ShardKind, schema: pa.Schema, fix: str) -> None:
    """Raise ShardError unless ``schema`` has exactly the kind's column names and types."""
    found = {f.name: f.type for f in schema}
    missing = [f.name for f in spec.schema if f.name not in found]
    if missing:
        raise ShardError(f"{path}: {spec.name} shard is missing column(s) {', '.join(missing)}; {fix}")
    for field in spec.schema:
        if found[field.name] != field.type:
            raise ShardError(
                f"{path}: column {field.name!r} has type {found[field.name]} where {field.type} is expected; {fix}"
            )
    extra = [name for name in schema.names if name not in spec.schema.names]
    if extra:
        raise ShardError(f"{path}: {spec.name} shard has unexpected column(s) {', '.join(extra)}; {fix}")


def _read_checksum(path: Path, fix: str) -> str:
    """The SHA-256 hex digest recorded in the shard's checksum file."""
    checksum = checksum_path(path)
    try:
        text = checksum.read_text(encoding="ascii")
    except FileNotFoundError:
        raise ShardError(
            f"{path}: checksum file {checksum.name} is missing (the write did not finish); {fix}"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ShardError(f"{path}: checksum file {checksum.name} is unreadable ({err}); {fix}") from err
    parts = text.split()
    if len(parts) != 2 or len(parts[0]) != 64:
        raise ShardError(f"{path}: checksum file {checksum.name} is malformed; {fix}")
    if parts[1] != path.name:
        raise ShardError(f"{path}: checksum file {checksum.name} belongs to {parts[1]!r}, not this shard; {fix}")
    return parts[0].lower()
