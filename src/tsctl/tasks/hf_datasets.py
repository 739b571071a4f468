"""Problem rows from Hugging Face datasets: a folder written by ``save_to_disk``, or a dataset on the hub.

A file task's data path (``task.file.train_path``, ``task.file.heldout_path``) names a JSONL or Parquet file
(:func:`tsctl.tasks.records.read_records`), a folder that ``Dataset.save_to_disk`` wrote (a ``DatasetDict`` writes
one such folder per split, and the path names one of them), or a hub dataset ``hub:<owner>/<name>:<split>``
(``hub:<owner>/<name>/<config>:<split>`` for a configuration). Their rows are mapped by the same fields and
``on_bad_row`` rules as a file's (:func:`tsctl.tasks.records.map_rows`), numbered from 1 as Parquet rows are.
The ``datasets`` package reads both kinds; it is the ``hf-datasets`` extra (:data:`INSTALL`). A benchmark's
``hf_dataset`` is loaded by :func:`load_hub_dataset` too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tsctl.tasks.records import DataError, Record, map_rows, read_records
from tsctl.tasks.row_size import BATCH_ROWS, RowLimit, TooLarge, table_rows

HUB_PREFIX = "hub:"
"""What starts a hub dataset id in a data path; a local path never needs to start so (write ``./hub:...``)."""

HUB_FORM = "hub:<owner>/<name>:<split> or hub:<owner>/<name>/<config>:<split> (e.g. hub:openai/gsm8k/main:train)"
"""The syntax of a hub dataset id, quoted where one is malformed."""

INSTALL = 'pip install -e ".[hf-datasets]"'
"""The install of the ``datasets`` package that reads saved folders and hub datasets."""

_ONE_SPLIT_FILES = ("state.json", "dataset_info.json")
_SPLITS_FILE = "dataset_dict.json"


@dataclass(frozen=True)
class HubId:
    """A hub dataset named in a data path: its repository, configuration (None: the default) and split."""

    repo: str
    config: str | None
    split: str

    def __str__(self) -> str:
        config = f"/{self.config}" if self.config else ""
        return f"{HUB_PREFIX}{self.repo}{config}:{self.split}"


def is_hub_id(path: str) -> bool:
    """Whether a data path names a hub dataset (it starts with :data:`HUB_PREFIX`)."""
    return path.startswith(HUB_PREFIX)


def parse_hub_id(path: str) -> HubId:
    """The hub dataset a ``hub:`` data path names.

    Raises:
        ValueError: a path that is not of the form :data:`HUB_FORM`.
    """
    name, colon, split = path.removeprefix(HUB_PREFIX).partition(":")
    parts = name.split("/")
    if not colon or not split.strip() or len(parts) not in (2, 3) or not all(part.strip() for part in parts):
        raise ValueError(f"{path!r} is not a hub dataset id: write {HUB_FORM}")
    return HubId("/".join(parts[:2]), parts[2] if len(parts) == 3 else None, split)


def is_saved_dataset(folder: Path) -> bool:
    """Whether ``folder`` was written by ``save_to_disk``: one split (its state and info files) or several."""
    return all((folder / name).is_file() for name in _ONE_SPLIT_FILES) or (folder / _SPLITS_FILE).is_file()


def read_data(path: str, fields: Mapping[str, str | None], on_bad_row: str, *, path_key: str, **options: Any) -> tuple[list[Record], int]:
    """The mapped rows of a data path: a hub dataset, a ``save_to_disk`` folder, else a JSONL or Parquet file.

    ``path_key`` is the setting that names ``path``; ``fields``, ``on_bad_row`` and ``options`` (``answer_rule``,
    ``optional``, ``fix``, ``skip_key``, ``row_limit``) are those of :func:`~tsctl.tasks.records.read_records`.

    Returns:
        ``(records, skipped)``, as :func:`~tsctl.tasks.records.read_records`.

    Raises:
        DataError: what :func:`~tsctl.tasks.records.read_records` refuses; a folder that is not a saved dataset; a
            folder of several splits, or a split it lacks (naming those it has); a hub dataset that cannot be loaded
            (the hub unreachable: how to use a local copy); ``datasets`` not installed (:data:`INSTALL`).
    """
    folder = Path(path)
    if is_hub_id(path):
        rows = _dataset_rows(_load_hub(parse_hub_id(path), path_key), options.get("row_limit"))
    elif folder.is_dir() and is_saved_dataset(folder):
        rows = _dataset_rows(_load_split(folder, path_key), options.get("row_limit"))
    elif folder.is_dir():
        raise DataError(f"{folder} is a folder, not a data file; point {path_key} at a JSONL or Parquet file, or at a folder "
                        f"written by datasets' save_to_disk (one with {' and '.join(_ONE_SPLIT_FILES)})")
    elif not folder.exists() and (folder.parent / _SPLITS_FILE).is_file():
        raise _split_error(folder.parent, path_key, f"has no split {folder.name!r}")
    else:
        return read_records(folder, fields, on_bad_row, path_key=path_key, **options)
    options.pop("row_limit", None)
    return map_rows(rows, f"{path} row", fields, on_bad_row, field_word="column", **options)


def load_hub_dataset(repo: str, config: str | None, split: str, label: str, path_key: str, folders: bool = True) -> Any:
    """One split of a hub dataset (``datasets.load_dataset``; a copy in the local cache serves offline).

    ``label`` names the dataset in messages; ``path_key`` is the setting to point at a local copy, which may be a
    ``save_to_disk`` folder where ``folders`` (else a Parquet file only).

    Raises:
        DataError: the hub unreachable (or offline) with no cached copy: one line with the command that saves a local
            copy; an unknown dataset, configuration or split; ``datasets`` not installed (:data:`INSTALL`).
    """
    datasets = _datasets_module(f"{label} is a Hugging Face hub dataset")
    try:
        with _quiet_retries():
            return datasets.load_dataset(repo, config, split=split)
    except ConnectionError:
        load = f"datasets.load_dataset({', '.join(repr(value) for value in (repo, config) if value)}, split={split!r})"
        parquet = f".to_parquet('{split}.parquet')"
        save = f"{load}.save_to_disk('data-{split}')\" (or {parquet})" if folders else f"{load}{parquet}\""
        raise DataError(
            f"{label}: the Hugging Face hub is unreachable (or HF_HUB_OFFLINE is set) and the dataset is not in the local "
            f"cache; use a local copy: where the hub is reachable, save it with python -c \"import datasets; {save}, copy it "
            f"here, then set {path_key} to that copy"
        ) from None
    except (FileNotFoundError, ValueError) as error:
        raise DataError(f"{label}: cannot load it: {_first_line(error)}") from None


def _load_hub(hub: HubId, path_key: str) -> Any:
    return load_hub_dataset(hub.repo, hub.config, hub.split, f"{path_key}={hub}", path_key)


def _load_split(folder: Path, path_key: str) -> Any:
    """The one split saved in ``folder``; a folder of several splits is refused, naming them."""
    datasets = _datasets_module(f"{folder} is a folder written by datasets' save_to_disk")
    loaded = _load_from_disk(datasets, folder)
    if isinstance(loaded, datasets.DatasetDict):
        raise _split_error(folder, path_key, "holds several splits")
    return loaded


def _split_error(folder: Path, path_key: str, problem: str) -> DataError:
    """The error of a ``DatasetDict`` folder without the split asked for, listing the splits it has."""
    datasets = _datasets_module(f"{folder} is a folder written by datasets' save_to_disk")
    splits = list(_load_from_disk(datasets, folder))
    return DataError(f"the saved dataset {folder} {problem} (its splits: {', '.join(splits)}); point {path_key} at one of "
                     f"them, e.g. {path_key}={folder / splits[0]}")


def _load_from_disk(datasets: ModuleType, folder: Path) -> Any:
    try:
        return datasets.load_from_disk(str(folder))
    except (OSError, ValueError) as error:  # pyarrow's errors for a damaged file are ValueErrors
        raise DataError(f"cannot read the saved dataset {folder}: {_first_line(error)}; save it again with save_to_disk") from None


def _dataset_rows(dataset: Any, row_limit: RowLimit | None) -> Iterator[tuple[int, dict | DataError]]:
    """``(row number, row)`` of a ``datasets.Dataset``, numbered from 1, a batch of Arrow rows at a time; a
    :class:`~tsctl.tasks.records.DataError` in place of a row past ``row_limit``."""
    for number, row in table_rows(dataset.with_format("arrow").iter(batch_size=BATCH_ROWS), row_limit):
        yield number, DataError(row.words()) if isinstance(row, TooLarge) else row


def _datasets_module(what: str) -> ModuleType:
    """The ``datasets`` package, or a DataError saying ``what`` needs it and how to install it."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"{what}, which needs the datasets package: {INSTALL}") from None
    return datasets


@contextmanager
def _quiet_retries() -> Iterator[None]:
    """The hub client's warnings of each retried request kept off the console (its final error is reported)."""
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub_logger.setLevel(level)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else type(error).__name__
