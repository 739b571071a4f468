"""Reading problem rows from JSONL or Parquet files, with field mapping and gold-answer rules.

Real datasets name their fields differently (``problem`` or ``question``) and keep the gold answer in
different shapes, so a reader maps output keys to source fields and picks an :data:`ANSWER_RULES`
entry for the answer. Every problem with the data is a :class:`DataError` whose message names the
file, the 1-based line (row, for Parquet) and the field, and says how to fix it.
"""

from __future__ import annotations

import ast
import json
import math
import re
import shlex
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tsctl.tasks.grading import after_last, last_boxed
from tsctl.tasks.row_size import BATCH_ROWS, RowLimit, TooLarge, jsonl_lines, table_rows

ANSWER_RULES = ("field", "boxed", "after_hashes", "list_first")
"""How the gold answer is read from the answer field: as is, the last ``\\boxed{}`` of it (a worked
solution, as in Minerva-Math), the text after its last ``####`` (GSM8K), or the first element of a
list or of a list rendered as a string like ``"['2']"`` (OlympiadBench)."""

BAD_ROW_POLICIES = ("error", "skip")
"""What a malformed row does: stop with a :class:`DataError`, or be skipped and counted."""

FORMATS = ("auto", "jsonl", "parquet")
"""File formats; ``auto`` decides by suffix (``.jsonl``/``.ndjson`` or ``.parquet``/``.pq``)."""

_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_DOLLAR_GROUP = re.compile(r"\$([^$]*)\$")


class DataError(ValueError):
    """A data file that cannot be read as asked: the message names the file, line and field, and the fix."""


@dataclass(frozen=True)
class Record:
    """One mapped row: its 1-based line (JSONL) or row number (Parquet) and its values by output key."""

    line: int
    values: dict[str, str | None]


def read_records(
    path: str | Path,
    fields: Mapping[str, str | None],
    on_bad_row: str = "error",
    *,
    answer_rule: str = "field",
    optional: Collection[str] = (),
    file_format: str = "auto",
    fix: Callable[[str], str] | None = None,
    skip_key: str | None = "on_bad_row",
    path_key: str | None = None,
    first_of: Collection[str] = (),
    row_limit: RowLimit | None = None,
    format_key: str | None = None,
) -> tuple[list[Record], int]:
    """Read and map every row of a JSONL or Parquet file.

    Args:
        path: the file.
        fields: output key -> source field name; None leaves the key out (its value is None).
            The ``answer`` key, when present, is read with ``answer_rule``.
        on_bad_row: ``error`` raises on the first bad row; ``skip`` drops bad rows and counts them.
        answer_rule: one of :data:`ANSWER_RULES`.
        optional: output keys whose missing source field yields None instead of a bad row.
        file_format: one of :data:`FORMATS`.
        fix: for an output key, the advice appended to a missing-field message (e.g.
            ``"set task.file.question_field=<field>"``).
        skip_key: the setting that skips bad rows, suggested in their messages (e.g.
            ``task.file.on_bad_row``); None where there is none (the rows must be fixed).
        path_key: the setting that names the file, to point at a converted copy (e.g.
            ``task.file.train_path``).
        first_of: output keys (not ``answer``) whose value may be a non-empty list of texts, read as its first item
            (a benchmark that stores several reference solutions); every other text field must be text.
        row_limit: the most bytes a row may hold (None: any); a larger row is a bad row, found before it is decoded
            (:mod:`tsctl.tasks.row_size`).
        format_key: the setting that names ``file_format``, suggested where the suffix tells no format (None: there is
            none, the file must be renamed).

    Returns:
        ``(records, skipped)``: the good rows in file order and the number of bad rows skipped.

    Raises:
        DataError: a missing or unreadable file, an unknown format, or (with ``on_bad_row=error``)
            a malformed line, a row past ``row_limit``, a missing field, or an answer the rule cannot find.
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path} is a folder, not a data file; point {path_key or 'the setting that names it'} at a JSONL or Parquet file")
    if not path.is_file():
        raise DataError(f"data file not found: {path} (resolved to {path.resolve()})")
    kind = _format_of(path, file_format, format_key)
    rows = _jsonl_rows(path, skip_key, path_key, row_limit) if kind == "jsonl" else _parquet_rows(path, row_limit)
    unit = "line" if kind == "jsonl" else "row"
    return map_rows(rows, f"{path} {unit}", fields, on_bad_row, answer_rule=answer_rule, optional=optional, fix=fix, skip_key=skip_key,
                    field_word="column" if kind == "parquet" else "field", first_of=first_of)


def map_rows(
    rows: Iterable[tuple[int, Any]],
    where: str,
    fields: Mapping[str, str | None],
    on_bad_row: str = "error",
    *,
    answer_rule: str = "field",
    optional: Collection[str] = (),
    fix: Callable[[str], str] | None = None,
    skip_key: str | None = "on_bad_row",
    field_word: str = "field",
    first_of: Collection[str] = (),
) -> tuple[list[Record], int]:
    """Map ``(number, row)`` pairs (a row is a dict, or a :class:`DataError` for an unreadable line).

    ``where`` prefixes each message's line number (``"data.jsonl line"``) and ``field_word`` names a field in it
    (``column`` for Parquet); the other arguments are those of :func:`read_records`.
    """
    if on_bad_row not in BAD_ROW_POLICIES:
        raise ValueError(f"on_bad_row={on_bad_row!r}: choose one of {', '.join(BAD_ROW_POLICIES)}")
    if answer_rule not in ANSWER_RULES:
        raise ValueError(f"answer_rule={answer_rule!r}: choose one of {', '.join(ANSWER_RULES)}")
    records: list[Record] = []
    skipped = 0
    for number, row in rows:
        try:
            if isinstance(row, DataError):
                raise row
            records.append(Record(number, _map_row(row, fields, answer_rule, optional, fix, field_word, first_of)))
        except DataError as error:
            if on_bad_row == "error":
                skip = f" (or set {skip_key}=skip to skip such rows)" if skip_key else "; fix or remove that row"
                raise DataError(f"{where} {number}: {error}{skip}") from None
            skipped += 1
    return records, skipped


def gold_answer(value: Any, rule: str) -> str:
    """The gold answer in a field value by an :data:`ANSWER_RULES` rule: text, or under ``field`` and in the items of
    ``list_first`` also a number (``27.0`` reads as ``27``: benchmarks store numeric answers so).

    Raises:
        DataError: when the value is of another type, or the rule finds no answer in it.
    """
    if rule == "list_first":
        if not isinstance(value, (str, list, tuple)):
            raise DataError(f"holds {kind_of(value)} ({_preview(value)}), expected a list (answer_rule=list_first) or its text")
        items = _as_list(value)
        if not items:
            raise DataError(f"expected a non-empty list (answer_rule=list_first), got {_preview(value)}")
        return _join_math_groups(_answer_text(items[0], rule))
    text = _answer_text(value, rule) if rule == "field" else as_text(value)
    if rule == "field":
        answer = text.strip()
    elif rule == "boxed":
        answer = last_boxed(text) or ""
    elif rule == "after_hashes":
        answer = after_last(text, "####") or ""
    else:
        raise ValueError(f"answer_rule={rule!r}: choose one of {', '.join(ANSWER_RULES)}")
    if not answer:
        raise DataError(f"no answer found by answer_rule={rule} in {_preview(value)}")
    return answer


def as_text(value: Any) -> str:
    """A field value that must be text (a question, a solution, a response), as is: nothing else is converted.

    Raises:
        DataError: naming the value's type and the expected one.
    """
    if isinstance(value, str):
        return value
    raise DataError(f"holds {kind_of(value)} ({_preview(value)}), expected text; store it as a string")


def _answer_text(value: Any, rule: str) -> str:
    """An answer that is text or a finite number (integral numbers without decimals)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(int(value)) if float(value).is_integer() else str(value)
    if isinstance(value, str):
        return value
    advice = "; answer_rule=list_first reads a list's first item" if isinstance(value, (list, tuple)) and rule == "field" else ""
    raise DataError(f"holds {kind_of(value)} ({_preview(value)}), expected text or a number{advice}")


def kind_of(value: Any) -> str:
    """The type of a field value in words (``an integer``, ``a list``, ...)."""
    kinds = [(bool, "a boolean"), (int, "an integer"), (float, "a float"), ((list, tuple), "a list"), (dict, "an object"), (bytes, "bytes")]
    if value is None:
        return "null"
    return next((word for types, word in kinds if isinstance(value, types)), f"a {type(value).__name__}")


def _map_row(
    row: Any,
    fields: Mapping[str, str | None],
    answer_rule: str,
    optional: Collection[str],
    fix: Callable[[str], str] | None,
    field_word: str,
    first_of: Collection[str] = (),
) -> dict[str, str | None]:
    if not isinstance(row, dict):
        raise DataError(f"expected a JSON object, got {_preview(row)}")
    values: dict[str, str | None] = {}
    for key, source in fields.items():
        if source is None:
            values[key] = None
            continue
        value = row.get(source)
        if value is None:
            if key in optional:
                values[key] = None
                continue
            advice = fix(key) if fix else f"map {key!r} to one of the row's fields"
            raise DataError(
                f"missing field {source!r} (for the {key}); the row has fields {sorted(row)}; {advice}"
            )
        try:
            if key == "answer":
                values[key] = gold_answer(value, answer_rule)
            elif key in first_of and isinstance(value, list):
                values[key] = as_text(value[0]) if value else as_text(value)
            else:
                values[key] = as_text(value)
        except DataError as error:
            raise DataError(f"{field_word} {source!r}: {error}") from None
    return values


def _format_of(path: Path, file_format: str, format_key: str | None) -> str:
    if file_format not in FORMATS:
        raise DataError(f"format={file_format!r} for {path}: choose one of {', '.join(FORMATS)}")
    if file_format != "auto":
        return file_format
    kind = _SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise DataError(
            f"cannot tell the format of {path} from its suffix: name it .jsonl or .parquet" + (f" (or set {format_key})" if format_key else "")
        )
    return kind


def _jsonl_rows(path: Path, skip_key: str | None, path_key: str | None, row_limit: RowLimit | None) -> Iterator[tuple[int, Any]]:
    """``(line, object)`` for each non-blank line; a :class:`DataError` in place of malformed JSON or of a line past
    ``row_limit``.

    A line that is not UTF-8 stops the reading whatever ``on_bad_row`` says: it means the whole file
    has another encoding, and skipping would silently drop every row with a non-ASCII character
    (:func:`_not_utf8` says how to convert it; ``skip_key`` and ``path_key`` as in :func:`read_records`).
    """
    with path.open("rb") as handle:
        for number, raw in jsonl_lines(handle, row_limit):
            if isinstance(raw, TooLarge):
                yield number, DataError(raw.words())
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise _not_utf8(path, number, raw, error.start, skip_key, path_key) from None
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as error:
                yield number, DataError(f"malformed JSON ({error.msg} at column {error.colno})")


def _not_utf8(path: Path, number: int, raw: bytes, start: int, skip_key: str | None, path_key: str | None) -> DataError:
    """The error for line ``number`` of ``path`` (bytes ``raw``), not UTF-8 from byte ``start`` on: the conversion of
    the whole file from the encoding it has (UTF-16 by its byte-order mark, else Windows-1252 where that decodes it,
    else Latin-1), or, where other lines hold UTF-8 text that a conversion would garble, the line to fix."""
    what = f"{path} line {number}: not UTF-8 text (byte 0x{raw[start]:02x} at column {start + 1})"
    data = path.read_bytes()
    bom = data[:2] in (b"\xff\xfe", b"\xfe\xff")
    utf8 = None if bom else next((n for n, line in enumerate(data.split(b"\n"), start=1) if not line.isascii() and _decodes(line, "utf-8")), None)
    if utf8 is not None:
        return DataError(f"{what}, while line {utf8} is UTF-8 text that converting the whole file would garble; re-save line {number} as UTF-8")
    source = "utf-16" if bom else "cp1252" if _decodes(data, "cp1252") else "latin1"
    converted = path.with_name(f"utf8-{path.name}")
    then = f", then set {path_key}={converted}" if path_key else ""
    ignored = f" ({skip_key}=skip does not skip that)" if skip_key else ""
    return DataError(f"{what}, so the file has another encoding{ignored}; convert it: iconv -f {source} -t utf-8 {shlex.quote(str(path))} > {shlex.quote(str(converted))}{then}")


def _decodes(data: bytes, encoding: str) -> bool:
    try:
        data.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def _parquet_rows(path: Path, row_limit: RowLimit | None) -> Iterator[tuple[int, Any]]:
    """``(row, object)`` for each row, a record batch at a time; a :class:`DataError` in place of a row past ``row_limit``."""
    import pyarrow.parquet as pq

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)
        for number, row in table_rows(batches, row_limit):
            yield number, DataError(row.words()) if isinstance(row, TooLarge) else row
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DataError(f"cannot read Parquet file {path}: {error}") from error


def _as_list(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            try:
                parsed = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                return []
            return list(parsed) if isinstance(parsed, (list, tuple)) else []
        return [text] if text else []
    return []


def _join_math_groups(text: str) -> str:
    """``"$69$,$84$"`` -> ``"69, 84"`` when the text is only ``$...$`` groups; else unchanged (stripped)."""
    text = text.strip()
    groups = _DOLLAR_GROUP.findall(text)
    if groups and not _DOLLAR_GROUP.sub("", text).strip(" ,."):
        return ", ".join(group.strip() for group in groups)
    return text


def _preview(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
