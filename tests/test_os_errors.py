"""File-system errors from below tsctl reach the command line as one ``error:`` line naming the path and
what to check, never as a traceback; a runs folder under a file is named as such, not as a permission."""

import errno
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import micro_args
from tsctl.cli import app
from tsctl.io.os_errors import one_line


@pytest.mark.parametrize(
    "err, line",
    [
        (NotADirectoryError(errno.ENOTDIR, "Not a directory", "/data/x.jsonl/a"),
         "not a directory: /data/x.jsonl/a; a part of that path is a file, not a folder; point the setting that names it at a folder"),
        (IsADirectoryError(errno.EISDIR, "Is a directory", "/data"), "is a directory: /data; it is a folder where a file is expected; point the setting that names it at a file"),
        (OSError(errno.ELOOP, "Too many levels of symbolic links", "/l"), "too many levels of symbolic links: /l; a symbolic link on that path points back at itself; fix or remove the link"),
        (OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"),
         "invalid cross-device link: /a -> /b; check that path and its permissions, then rerun (with resume=true for a run)"),
        (OSError("no errno"), "oserror: a file; check that path and its permissions, then rerun (with resume=true for a run)"),
    ],
)
def test_one_line_gives_the_os_words_the_path_and_what_to_check(err, line):
    assert one_line(err) == line


def error_line(args: list[str]) -> str:
    """The one ``error:`` line of ``tsctl ARGS`` (lines before it: the built-in model's warm-up, when not cached yet)."""
    result = CliRunner().invoke(app, args)
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert len(errors) == 1 and result.output.rstrip().endswith(errors[0]), result.output
    return errors[0]


def test_a_name_too_long_for_the_file_system_is_one_line(tmp_path, model_cache):
    name = "x" * 300
    line = error_line(["train", *micro_args(tmp_path / "runs", model_cache), f"name={name}"])
    assert line == f"error: file name too long: {tmp_path / 'runs' / 'default' / name}; the name is longer than the file system allows; choose a shorter name=... or experiment=..."


def test_a_runs_folder_under_a_file_names_the_file_not_a_permission(tmp_path, model_cache):
    (tmp_path / "file").write_text("x")
    runs = tmp_path / "file" / "runs"
    line = error_line(["train", *micro_args(runs, model_cache), "name=r"])
    assert line == (f"error: {tmp_path / 'file'} is a file, not a folder, so the run folder {runs / 'default' / 'r'} cannot be made; "
                    "point runs_dir=... at a folder (or choose another experiment=... or name=...)")
    assert CliRunner().invoke(app, ["train", *micro_args(tmp_path / "runs", model_cache), "name=r"]).exit_code == 0  # the fix: a folder
