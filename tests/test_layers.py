"""The house: every import in src/tsctl points down the layers, no package imports in a cycle, files stay small,
and no function of the trainer takes more than 6 parameters.

Layers, top to bottom (docs/ARCHITECTURE.md draws them):

1. ``cli`` (and ``__main__``)
2. ``stages`` (one module per command)
3. ``runconfig`` (every command's config: composed with the registries' settings blocks, checked), ``analysis``
   (the statistics of finished runs, which commands and scripts read)
4. ``trainer``, ``seeds``, ``engines``, ``evaluation``
5. ``algo``, ``tasks``, ``models``
6. ``config``, ``distributed``, ``io``

A module may import from its own layer or below. Within a layer the packages are ordered too
(``engines`` < ``seeds`` < ``trainer``; ``engines`` < ``evaluation``; ``algo`` < ``tasks`` < ``models``;
``config`` < ``distributed`` < ``io``): a package imports only packages before it in that order, so no two packages
of a layer import each other. Lazy imports inside functions count like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tsctl"

LAYERS: dict[str, int] = {
    "cli": 1, "__main__": 1,
    "stages": 2,
    "runconfig": 3, "analysis": 3,
    "trainer": 4, "seeds": 4, "engines": 4, "evaluation": 4,
    "algo": 5, "tasks": 5, "models": 5,
    "config": 6, "distributed": 6, "io": 6,
}
"""Layer of each room (top-level module or package of ``tsctl``)."""

SAME_LAYER: dict[str, set[str]] = {
    "__main__": {"cli"},
    "seeds": {"engines"},
    "trainer": {"engines", "seeds"},
    "evaluation": {"engines"},
    "tasks": {"algo"},
    "models": {"algo", "tasks"},
    "distributed": {"config"},
    "io": {"config", "distributed"},
}
"""The rooms of its own layer each room may import (none is allowed both ways)."""

STAGE_RUNS: dict[str, set[str]] = {
    "ablate": {"train"},
    "train": {"warmup"},
    "seed": {"warmup"},
    "rollout": {"warmup"},
    "eval": {"warmup"},
}
"""Stage modules that run another command (``tsctl ablate`` trains and reports; a base model is warmed up first)."""

MAX_LINES = 350
MAX_PARAMETERS = 6
"""Most parameters of a function of ``trainer/`` (``self`` and ``cls`` not counted): more travel together in a context."""


def modules() -> dict[str, Path]:
    """``tsctl.x.y`` -> file, for every module of the package."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path) -> set[str]:
    """Every ``tsctl`` module ``path`` imports, at module level or inside functions (names resolved to modules)."""
    found: set[str] = set()
    known = modules()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("tsctl"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tsctl"):
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                found.add(name if name in known else node.module)
    return found


def room(module: str) -> str:
    """The room of ``tsctl.<room>...``; the package itself is ``tsctl``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tsctl"


def edges() -> list[tuple[str, str]]:
    return [(src, dst) for src, path in modules().items() for dst in sorted(imports(path)) if dst != "tsctl"]


def test_every_room_has_a_layer():
    rooms = {room(m) for m in modules()} - {"tsctl"}
    assert rooms == set(LAYERS), f"rooms without a layer: {rooms - set(LAYERS)}; layers without a room: {set(LAYERS) - rooms}"


def test_imports_point_down_the_layers():
    upward = []
    for src, dst in edges():
        a, b = room(src), room(dst)
        if a == b:
            continue
        if LAYERS[b] < LAYERS[a] or (LAYERS[b] == LAYERS[a] and b not in SAME_LAYER.get(a, set())):
            upward.append(f"{src} -> {dst}")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_same_layer_allowances_point_one_way():
    both = [(a, b) for a, allowed in SAME_LAYER.items() for b in allowed if a in SAME_LAYER.get(b, set())]
    assert not both and all(LAYERS[a] == LAYERS[b] for a, allowed in SAME_LAYER.items() for b in allowed)


def test_stages_import_only_the_stages_they_run():
    found = {}
    for src, dst in edges():
        if room(src) == room(dst) == "stages" and src.split(".")[2:3] != dst.split(".")[2:3]:
            caller, callee = src.split(".")[2], dst.split(".")[2]
            if callee not in STAGE_RUNS.get(caller, set()):
                found.setdefault(caller, set()).add(callee)
    assert not found, f"stages importing stages they do not run: {found}"


def test_no_import_cycle_between_modules():
    graph: dict[str, set[str]] = {}
    for src, dst in edges():
        graph.setdefault(src, set()).add(dst)
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_no_module_is_over_350_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(SRC)} has {lines} lines; split it by concern"


def test_no_trainer_function_takes_more_than_6_parameters():
    wide = []
    for path in sorted((SRC / "trainer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + [x.arg for x in (a.vararg, a.kwarg) if x is not None]
                names = [n for n in names if n not in ("self", "cls")]
                if len(names) > MAX_PARAMETERS:
                    wide.append(f"{path.relative_to(SRC)}:{node.lineno} {getattr(node, 'name', 'lambda')} takes {len(names)}")
    assert not wide, "functions of trainer/ with more than 6 parameters:\n" + "\n".join(wide)


def test_scripts_and_bench_import_no_command_module():
    root = SRC.parents[1]
    found = [f"{path.relative_to(root)} -> {name}" for folder in ("scripts", "bench") for path in sorted((root / folder).rglob("*.py"))
             for name in sorted(imports(path)) if room(name) in ("stages", "cli", "__main__")]
    assert not found, "scripts and bench import command modules:\n" + "\n".join(found)


def test_the_checks_see_an_upward_import(tmp_path, monkeypatch):
    # The walker itself: a lazy upward import inside a function is found.
    fake = tmp_path / "x.py"
    fake.write_text("def f():\n    from tsctl.stages.train import train_step\n")
    assert "tsctl.stages.train.train_step" not in imports(fake) and "tsctl.stages.train" in imports(fake)
