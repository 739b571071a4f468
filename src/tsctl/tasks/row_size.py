"""Rows too large to be a problem, found by their size in bytes before they are decoded, mapped or tokenized.

A JSONL line is read at most ``limit + 1`` bytes at a time: a longer one is passed over in 1 MiB chunks, counted and
never held whole, so a data file of any size is refused in seconds and in little memory. A Parquet file or a
``datasets`` split is read one record batch at a time and each row's text and binary columns are measured in Arrow
before the batch becomes Python objects (an Arrow batch is held whole, as the file's row group is).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

CHUNK = 1 << 20
"""Bytes read at a time while an overlong line is passed over."""

BATCH_ROWS = 1024
"""Rows per record batch read from a Parquet file or a ``datasets`` split."""


@dataclass(frozen=True)
class RowLimit:
    """The most bytes one row may hold (a JSONL line without its newline; a table row's text and binary columns), and
    the setting that raises it."""

    size: int
    key: str


@dataclass(frozen=True)
class TooLarge:
    """A row of ``size`` bytes, past ``limit``: what stands in for it."""

    size: int
    limit: RowLimit

    def words(self) -> str:
        """Why the row is refused, and the fixes."""
        key = self.limit.key
        return f"{self.size} bytes, more than the {self.limit.size} a row may hold ({key}); remove or shorten that row, or raise {key}"


def jsonl_lines(handle: BinaryIO, limit: RowLimit | None) -> Iterator[tuple[int, bytes | TooLarge]]:
    """``(line number, bytes)`` of each line of a binary file, from 1; a :class:`TooLarge` in place of a line longer
    than ``limit`` (never read whole)."""
    if limit is None:
        yield from enumerate(handle, start=1)
        return
    number = 0
    while raw := handle.readline(limit.size + 1):
        number += 1
        if len(raw) <= limit.size or raw.endswith(b"\n"):
            yield number, raw
            continue
        size = len(raw)
        while raw and not raw.endswith(b"\n"):
            raw = handle.readline(CHUNK)
            size += len(raw)
        yield number, TooLarge(size - (1 if raw.endswith(b"\n") else 0), limit)


def table_rows(batches: Iterable[Any], limit: RowLimit | None) -> Iterator[tuple[int, dict | TooLarge]]:
    """``(row number, row)`` of Arrow record batches or tables, from 1; a :class:`TooLarge` in place of a row larger
    than ``limit``, which is never turned into Python objects."""
    number = 0
    for batch in batches:
        sizes = row_bytes(batch) if limit is not None else []
        if limit is None or not sizes or max(sizes) <= limit.size:
            yield from enumerate(batch.to_pylist(), start=number + 1)
        else:
            import pyarrow as pa

            kept = iter(batch.filter(pa.array([size <= limit.size for size in sizes])).to_pylist())
            for offset, size in enumerate(sizes, start=number + 1):
                yield offset, next(kept) if size <= limit.size else TooLarge(size, limit)
        number += batch.num_rows


def row_bytes(batch: Any) -> list[int]:
    """Each row's bytes in the text and binary columns of an Arrow batch or table (other columns count 0)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    total = pa.array([0] * batch.num_rows, pa.int64())
    for field in batch.schema:
        kind = field.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            total = pc.add(total, pc.fill_null(pc.binary_length(batch.column(field.name)), 0).cast(pa.int64()))
    return total.to_pylist()
