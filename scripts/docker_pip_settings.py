"""The host's pip settings that an image build needs, for ``scripts/docker_check.sh``.

    python scripts/docker_pip_settings.py --mount-root /dev/shm/pip-host   # podman build: its local paths mounted
    python scripts/docker_pip_settings.py --remote-only                    # docker build: it cannot mount host paths

Reads ``pip config list`` (its files and PIP_* variables, a variable over an ``[install]`` value over a
``[global]`` one) for the settings that decide where packages come from: index-url, extra-index-url, find-links,
cert, constraint, trusted-host. Prints one tab-separated line each:

- ``arg<TAB>PIP_NAME<TAB>value``: a build argument of the Dockerfile's install steps;
- ``mount<TAB>host path<TAB>path in the build``: a local path the settings name, to mount read-only under the
  mount root, where the arguments point (a wheel folder, a CA bundle, a constraints file; for a ``file://`` index
  the folder holding it, since a local simple index links to files beside it: ``../../files/...``). A mount root
  on a tmpfs of the build container (``/dev/shm``) leaves no mount point in the image;
- ``skipped<TAB>value<TAB>setting``: with ``--remote-only``, a local value left out.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

SETTINGS = ("index-url", "extra-index-url", "find-links", "cert", "constraint", "trusted-host")
"""pip's settings that choose or reach the package sources; each becomes the build argument ``PIP_<NAME>``."""

INDEXES = ("index-url", "extra-index-url")
"""Settings whose values are package indexes (a ``file://`` one is local)."""

PATHS = ("find-links", "cert", "constraint")
"""Settings whose values may be local paths (absolute, or ``file://`` URLs)."""


def parse_config_list(text: str) -> dict[str, str]:
    """``pip config list``'s lines (``section.name='value'``, section ``:env:`` for a PIP_* variable) -> the
    effective value of each of :data:`SETTINGS` that is set, whitespace-separated lists on one line."""
    by_section: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if not sep or name not in SETTINGS:
            continue
        by_section.setdefault(section, {})[name] = " ".join(str(ast.literal_eval(value)).split())
    effective: dict[str, str] = {}
    for section in ("global", "install", ":env:"):  # later ones win, as pip reads them for `pip install`
        effective.update(by_section.get(section, {}))
    return effective


def named_path(item: str, setting: str) -> Path | None:
    """The local path one value of ``setting`` names; None for a remote URL, a host name or a relative path."""
    if setting not in INDEXES + PATHS:
        return None
    if item.startswith("file://"):
        return Path(unquote(urlparse(item).path))
    return Path(item) if item.startswith("/") and setting in PATHS else None


def moved(settings: dict[str, str], root: Path) -> tuple[dict[str, str], list[tuple[Path, Path]]]:
    """``settings`` with each local path moved under ``root``, and the (host path, path under ``root``) pairs to
    mount: each existing path (a ``file://`` index's parent folder), a path inside another one left out."""
    rewritten: dict[str, str] = {}
    found: set[Path] = set()
    for setting, value in settings.items():
        items = []
        for item in value.split():
            path = named_path(item, setting)
            if path is None:
                items.append(item)
                continue
            inside = root / path.relative_to("/")
            items.append(f"file://{quote(str(inside))}" if item.startswith("file://") else str(inside))
            mount = path.parent if setting in INDEXES else path
            if mount.exists():
                found.add(mount)
        rewritten[setting] = " ".join(items)
    mounts = [p for p in sorted(found) if not any(o in p.parents for o in found)]
    return rewritten, [(p, root / p.relative_to("/")) for p in mounts]


def remote_only(settings: dict[str, str]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """``settings`` without their local values (a setting left empty is dropped), and the (value, setting) dropped."""
    kept: dict[str, str] = {}
    dropped: list[tuple[str, str]] = []
    for setting, value in settings.items():
        local = [i for i in value.split() if named_path(i, setting) is not None or (setting in PATHS and "://" not in i)]
        dropped += [(i, setting) for i in local]
        remote = [i for i in value.split() if i not in local]
        if remote:
            kept[setting] = " ".join(remote)
    return kept, dropped


def main(argv: list[str] | None = None) -> None:
    """Print the host's settings for a build that mounts them (``--mount-root``) or cannot (``--remote-only``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--mount-root", type=Path, help="where the build mounts the host's local paths (absolute)")
    how.add_argument("--remote-only", action="store_true", help="leave the local values out")
    args = parser.parse_args(argv)
    if args.mount_root is not None and not args.mount_root.is_absolute():
        parser.error(f"--mount-root {args.mount_root} is relative: give an absolute path such as /dev/shm/pip-host")
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    settings = parse_config_list(listed.stdout)
    mounts: list[tuple[Path, Path]] = []
    dropped: list[tuple[str, str]] = []
    if args.remote_only:
        settings, dropped = remote_only(settings)
    else:
        settings, mounts = moved(settings, args.mount_root)
    for setting, value in settings.items():
        print(f"arg\tPIP_{setting.upper().replace('-', '_')}\t{value}")
    for host, inside in mounts:
        print(f"mount\t{host}\t{inside}")
    for value, setting in dropped:
        print(f"skipped\t{value}\t{setting}")


if __name__ == "__main__":
    main()
