"""What the rows of a seed or rollout shard hold, checked against the model and the config that will use them.

:func:`tsctl.io.shards.read_shard` trusts a shard's bytes (its checksum), kind, version and columns; a shard written
again with a fresh ``.sha256`` passes all of those whatever its rows hold. :func:`check_rows` checks the rows themselves,
against plain numbers the reader knows (:class:`RowLimits`: the model's vocabulary, the engine's context, the
config's count per prompt), and :func:`read_checked` reads a shard and checks it. Every command that reads a seed or
rollout shard reads it through them (``tsctl rollout``, and ``tsctl train``'s seed windows, resume included).

The checks, in this order; the first that fails raises one :class:`~tsctl.io.shards.ShardError` naming the file, the
first row that fails it (with how many more do), the column, and the fix:

- no value is null where the kind allows none;
- rows come in blocks of ``per_prompt`` (seed: the seeds of one prompt; rollout: one group of ``trainer.n`` samples,
  one ``group`` number), each block one ``prompt_id``; with :attr:`RowLimits.prompts`, exactly that many blocks;
- every prompt has a token, and every token id of ``prompt_ids`` and ``response_ids`` lies in ``[0, vocab)``;
- ``logprobs`` (and a seed's ``entropies``) hold one value per response token;
- ``len(prompt_ids) + len(response_ids) <= context``;
- seed: ``0 <= span <= len(response_ids)``, ``0 <= cut <= span`` and ``len(prompt_ids) + cut + 1 <= context`` (a seed
  is continued by at least one token); rollout: ``0 <= prefix_len <= len(response_ids)``;
- log-probs (and a seed's entropies) are finite, except NaN where pi_b is unknown: a row whose ``checkpoint``
  (rollout: ``behaviour_checkpoint``) begins with one of :attr:`RowLimits.unknown_pi_b` (a trace), for the whole
  response of a seed and for the prefix tokens of a rollout.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tsctl.io.shards import KINDS, ROLLOUT, SEED, Shard, ShardError, read_shard

Say = Callable[[int], str]
"""What is wrong with a row, given its index."""
Check = tuple[str, np.ndarray, Say]
"""One check: the column, whether each row fails it [rows], and what is wrong with a failing row."""


@dataclass(frozen=True)
class RowLimits:
    """What a shard's rows must fit, as plain numbers.

    Attributes:
        vocab: token ids lie in ``[0, vocab)`` (the model's embedding rows); None: not checked (model not loaded yet).
        context: tokens of prompt + response per request (the engine's); None: no limit known.
        per_prompt: rows per prompt: seeds per prompt (``ratio`` of ``trainer.n``) or samples per group (``trainer.n``).
        prompts: the number of prompts the shard must hold; None: any.
        unknown_pi_b: ``checkpoint`` prefixes of the seed sources whose pi_b is unknown (NaN log-probs allowed).
    """

    vocab: int | None
    context: int | None
    per_prompt: int
    prompts: int | None = None
    unknown_pi_b: tuple[str, ...] = ()


def read_checked(path: str | os.PathLike[str], kind: str, limits: RowLimits, fix: str | None = None) -> Shard:
    """:func:`~tsctl.io.shards.read_shard`, then :func:`check_rows`; ``fix`` (default: write it again with the kind's
    producer) ends a content refusal."""
    shard = read_shard(path, kind)
    check_rows(Path(path), kind, shard.table, limits, fix)
    return shard


def check_rows(path: Path, kind: str, table: pa.Table, limits: RowLimits, fix: str | None = None) -> None:
    """Raise ShardError at the first check (module docstring) that a row of ``table``, the ``kind`` shard ``path``, fails."""
    if kind not in (SEED.name, ROLLOUT.name):
        raise ValueError(f"shard contents are checked for seed and rollout shards, not {kind!r}")
    fix = fix or f"write it again with `{KINDS[kind].producer}` (its settings and shards.overwrite=true)"
    rows = _Rows(table)
    for field, bad, say in _checks(kind, rows, limits):
        where = np.flatnonzero(bad)
        if where.size:
            more = f" (and {where.size - 1} more row(s))" if where.size > 1 else ""
            raise ShardError(f"{path}: row {where[0]}, {field}: {say(int(where[0]))}{more}; {fix}")


class _Rows:
    """A table's columns as numpy arrays: scalars by name, list columns flattened with each value's row and position."""

    def __init__(self, table: pa.Table) -> None:
        self.table, self.count = table, table.num_rows

    def column(self, name: str) -> pa.Array:
        return self.table[name].combine_chunks()

    def scalars(self, name: str) -> np.ndarray:
        """The column's values, shape [rows]."""
        return self.column(name).to_numpy(zero_copy_only=False)

    def lengths(self, name: str) -> np.ndarray:
        """Values per row of a list column, shape [rows]."""
        return pc.list_value_length(self.column(name)).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)

    def flat(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A list column's values, all rows' one after another [V], and where each row's begin [rows + 1]."""
        values = pc.list_flatten(self.column(name)).to_numpy(zero_copy_only=False)
        return values, np.concatenate([[0], np.cumsum(self.lengths(name))])

    def nulls(self, name: str) -> np.ndarray:
        """Whether each row holds a null, or a list with a null in it, shape [rows]."""
        array = self.column(name)
        bad = array.is_null().to_numpy(zero_copy_only=False)
        if pa.types.is_list(array.type):
            values = pc.list_flatten(array)
            parents = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
            bad = bad.copy()
            bad[parents[values.is_null().to_numpy(zero_copy_only=False)]] = True
        return bad


def _located(starts: np.ndarray, hits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The row [H] and the position in it [H] of flat values ``hits`` [H], given where each row begins [rows + 1]."""
    parents = np.searchsorted(starts, hits, side="right") - 1
    return parents, hits - starts[parents]


def _per_row(count: int, hits: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows with a bad value [rows] and, per row, the index into ``hits`` [H] of its first (-1 where none) [rows]."""
    first = np.full(count, -1, dtype=np.int64)
    first[parents[::-1]] = np.arange(hits.size)[::-1]  # the last write per row wins: the first bad value
    return first >= 0, first


def _checks(kind: str, rows: _Rows, limits: RowLimits) -> Iterator[Check]:
    """Each check in order, computed when it is reached: a null found stops the ones that read the values."""
    spec = KINDS[kind]
    for field in spec.schema.names:
        if field not in spec.nullable:
            yield field, rows.nulls(field), lambda i: "holds no value (null)"
    yield from _counts(rows, limits, *(("prompt_id", "seed(s)") if kind == SEED.name else ("group", "sample(s)")))
    prompt, response = rows.lengths("prompt_ids"), rows.lengths("response_ids")
    yield "prompt_ids", prompt == 0, lambda i: "no token (a prompt has at least one)"
    if limits.vocab is not None:
        for field in ("prompt_ids", "response_ids"):
            yield _token_ids(rows, field, limits.vocab)
    for field in spec.aligned:
        aligned = rows.lengths(field)
        yield field, aligned != response, lambda i, a=aligned: f"{a[i]} values for {response[i]} response tokens"
    if limits.context is not None:
        yield "prompt_ids + response_ids", prompt + response > limits.context, lambda i: (
            f"{prompt[i]} + {response[i]} = {prompt[i] + response[i]} tokens, beyond the context of {limits.context}")
    if kind == SEED.name:
        span, cut = rows.scalars("span").astype(np.int64), rows.scalars("cut").astype(np.int64)
        yield "span", (span < 0) | (span > response), lambda i: f"{span[i]} is outside [0, {response[i]}] (the response's tokens)"
        yield "cut", (cut < 0) | (cut > span), lambda i: f"{cut[i]} is outside [0, span={span[i]}] (the response's tokens {response[i]})"
        if limits.context is not None:
            yield "cut", prompt + cut + 1 > limits.context, lambda i: (
                f"prompt {prompt[i]} + prefix {cut[i]} + 1 continued token = {prompt[i] + cut[i] + 1}, beyond the context of {limits.context}")
        unknown = _unknown(rows.scalars("checkpoint"), limits.unknown_pi_b)
        for field in ("logprobs", "entropies"):
            yield _finite(rows, field, lambda parents, positions: unknown[parents])
    else:
        prefix = rows.scalars("prefix_len").astype(np.int64)
        yield "prefix_len", (prefix < 0) | (prefix > response), lambda i: f"{prefix[i]} is outside [0, {response[i]}] (the response's tokens)"
        unknown = _unknown(rows.scalars("behaviour_checkpoint"), limits.unknown_pi_b)
        yield _finite(rows, "logprobs", lambda parents, positions: unknown[parents] & (positions < prefix[parents]))


def _token_ids(rows: _Rows, field: str, vocab: int) -> Check:
    """Rows with a token id of ``field`` outside ``[0, vocab)``."""
    ids, starts = rows.flat(field)
    hits = np.flatnonzero((ids < 0) | (ids >= vocab))
    parents, positions = _located(starts, hits)
    bad, first = _per_row(rows.count, hits, parents)
    return field, bad, lambda i: f"token id {ids[hits[first[i]]]} at position {positions[first[i]]} is outside the model's vocabulary [0, {vocab})"


def _finite(rows: _Rows, field: str, unknown: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Check:
    """Rows with a value of ``field`` that is not finite, NaN excepted where ``unknown(rows [V], positions [V])`` [V] says
    pi_b is unknown."""
    values, starts = rows.flat(field)
    hits = np.flatnonzero(~np.isfinite(values))
    parents, positions = _located(starts, hits)
    kept = ~(np.isnan(values[hits]) & unknown(parents, positions))
    hits, parents, positions = hits[kept], parents[kept], positions[kept]
    bad, first = _per_row(rows.count, hits, parents)
    return field, bad, lambda i: f"{values[hits[first[i]]]} at position {positions[first[i]]} is not finite"


def _unknown(checkpoints: np.ndarray, labels: tuple[str, ...]) -> np.ndarray:
    """Whether each row's seed comes from a source whose pi_b is unknown, shape [rows]."""
    return np.array([str(c).startswith(labels) for c in checkpoints], dtype=bool)


def _counts(rows: _Rows, limits: RowLimits, key: str, what: str) -> Iterator[Check]:
    """Rows in whole blocks of ``limits.per_prompt``, each block one prompt (and one ``key``), ``limits.prompts`` blocks."""
    k, n = limits.per_prompt, rows.count
    wanted = f"{k} {what} per prompt"
    if limits.prompts is not None and n != limits.prompts * k:
        row, problem = min(n, limits.prompts * k), f"{n} rows where {limits.prompts} prompts at {wanted} take {limits.prompts * k}"
    elif n == 0 or n % k:
        row, problem = n - n % k, f"{n} rows, not a whole number of prompts at {wanted}" if n else "no rows"
    else:
        row, problem = -1, ""
    yield "prompt_id", np.arange(max(n, row + 1)) == row, lambda i: problem
    for field in dict.fromkeys(("prompt_id", key)):
        values = rows.scalars(field)
        head = values[(np.arange(n) // k) * k]
        yield field, values != head, lambda i, v=values, h=head: (
            f"'{v[i]}' inside rows {i - i % k}..{i - i % k + k - 1}, the block of '{h[i]}' ({wanted})")
