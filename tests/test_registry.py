"""The one registry helper: registration order, declared needs, discovery, lookups that name the valid entries; every
registry-backed key checked against its registry, and no registry name compared outside its registry."""

import ast
import sys
from pathlib import Path

import pytest

from tsctl.algo.advantages import ADVANTAGES
from tsctl.algo.aggregations import AGGREGATIONS
from tsctl.algo.divergences import DIVERGENCES
from tsctl.algo.losses import POLICY_LOSSES
from tsctl.algo.rollout_correction import CORRECTIONS
from tsctl.algo.stale_masks import STALE_MASKS
from tsctl.config.errors import ConfigError
from tsctl.config.registry import Registry
from tsctl.engines.registry import ENGINES
from tsctl.seeds.selectors import SELECTORS
from tsctl.seeds.sources import SOURCES
from tsctl.seeds.truncation import STRATEGIES
from tsctl.runconfig import compose_config
from tsctl.runconfig.registries import NONE_ALLOWED, REGISTRIES as REGISTRIES_OF_RUNCONFIG
from tsctl.tasks.registry import TASKS

SRC = Path(__file__).resolve().parents[1] / "src" / "tsctl"

KEYS = {
    "algo.aggregation": AGGREGATIONS, "truncation": STRATEGIES, "task.name": TASKS, "engine.name": ENGINES, "seeds.selector": SELECTORS,
    "seeds.source": SOURCES, "algo.rollout_correction": CORRECTIONS, "algo.policy_loss": POLICY_LOSSES,
    "algo.adv_estimator": ADVANTAGES, "algo.kl_type": DIVERGENCES, "algo.stale_mask": STALE_MASKS,
}
"""Every config key that names an implementation, and its registry."""

REGISTRIES = {"STRATEGIES", "SELECTORS", "TASKS", "ENGINES", "SOURCES", "POLICY_LOSSES", "AGGREGATIONS", "ADVANTAGES", "CORRECTIONS", "DIVERGENCES", "STALE_MASKS"}
"""The names the registries of :data:`KEYS` are bound to where their entries register."""


def test_register_get_and_names_in_registration_order():
    shapes: Registry[int] = Registry("shape")
    shapes.register("square")(4)
    shapes.register("triangle")(3)
    assert shapes.get("triangle") == 3 and shapes.get("square") == 4 and shapes.names() == ("square", "triangle")


def test_an_unknown_name_is_one_line_listing_the_valid_ones():
    shapes: Registry[int] = Registry("shape")
    shapes.register("square")(4)
    shapes.register("triangle")(3)
    with pytest.raises(ValueError) as err:
        shapes.get("circle")
    assert str(err.value) == "unknown shape 'circle'; valid: square, triangle"


def test_a_name_registers_once():
    shapes: Registry[int] = Registry("shape")
    shapes.register("square")(4)
    with pytest.raises(ValueError, match="shape 'square' is already registered"):
        shapes.register("square")(5)
    assert shapes.get("square") == 4


def test_an_entry_declares_only_the_needs_its_registry_lists_and_gets_the_defaults_for_the_rest():
    shapes: Registry[int] = Registry("shape", corners=0, round=False)
    shapes.register("square", corners=4)(4)
    shapes.register("circle", round=True)(0)
    assert (shapes.needs("square").corners, shapes.needs("square").round) == (4, False)
    assert (shapes.needs("circle").corners, shapes.needs("circle").round) == (0, True)
    with pytest.raises(TypeError, match="shape 'star' declares colour; a shape declares corners, round"):
        shapes.register("star", colour="red")
    with pytest.raises(ValueError, match="unknown shape 'star'"):
        shapes.needs("star")


def test_a_module_dropped_into_the_package_registers_itself(tmp_path, monkeypatch):
    import tsctl.seeds

    (tmp_path / "throwaway_shape.py").write_text("from tsctl.seeds.selectors import SELECTORS\n\nSELECTORS.register('nearest')(lambda stats, prompts, rng, cfg: [0] * prompts)\n")
    monkeypatch.setattr(tsctl.seeds, "__path__", [*tsctl.seeds.__path__, str(tmp_path)])
    monkeypatch.setattr(SELECTORS, "_entries", dict(SELECTORS._entries))
    monkeypatch.setattr(SELECTORS, "_needs", dict(SELECTORS._needs))
    monkeypatch.delitem(sys.modules, "tsctl.seeds.throwaway_shape", raising=False)
    assert SELECTORS.get("nearest")(None, 2, None, None) == [0, 0] and SELECTORS.names()[-1] == "nearest"
    del sys.modules["tsctl.seeds.throwaway_shape"]


@pytest.mark.parametrize("key", sorted(KEYS))
def test_every_registry_backed_key_is_checked_against_its_registry(key):
    with pytest.raises(ConfigError) as err:
        compose_config([f"{key}=not_registered"])
    names = ("none", *KEYS[key].names()) if KEYS[key] in NONE_ALLOWED else KEYS[key].names()
    assert err.value.key == key and f"choose one of {', '.join(names)}" in str(err.value)


def test_every_registry_of_the_package_has_its_key():
    kinds = {node.args[0].value for path in SRC.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Registry"}
    assert kinds == {r.kind for r in KEYS.values()}, "a new registry needs its key in KEYS (and in runconfig/registries.py)"
    assert {key: r.key for key, r in KEYS.items()} == {key: key for key in KEYS}
    assert set(REGISTRIES_OF_RUNCONFIG) == set(KEYS.values())


def compared_names(tree: ast.AST, names: set[str], attr: str) -> list[tuple[int, str]]:
    """Where ``tree`` compares a string in ``names`` with an expression reading ``.<attr>`` (or pairs them in a tuple),
    passes one as ``name=``, or keys a dict by two or more of them."""

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [s for e in node.elts for s in strings(e)]
        return []

    def reads(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(node))

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and reads(node):
            found += [(node.lineno, s) for side in [node.left, *node.comparators] for s in strings(side) if s in names]
        elif isinstance(node, ast.Tuple) and any(reads(e) for e in node.elts):
            found += [(node.lineno, s) for e in node.elts for s in strings(e) if s in names]
        elif isinstance(node, ast.keyword) and node.arg == "name":
            found += [(node.value.lineno, s) for s in strings(node.value) if s in names]
        elif isinstance(node, ast.Dict):
            keyed = [s for k in node.keys if k is not None for s in strings(k) if s in names]
            found += [(node.lineno, s) for s in keyed] if len(keyed) > 1 else []
    return sorted(set(found))


def test_the_check_finds_each_kind_of_comparison():
    code = (
        "a.selector == 'bandit'\nb.selector in ('x', 'latest')\nf(name='vllm')\n{'fixed': 1, 'uniform': 2}.get(t)\n"
        "for k, v, d in (('k', s.selector, 'bandit'),): pass\n{'entropy': 1, 'loss': 2}\nz = 'latest'\nfamily == 'bandit'\n"
    )
    assert compared_names(ast.parse(code), {"bandit", "latest", "vllm", "fixed", "uniform", "entropy"}, "selector") == [
        (1, "bandit"), (2, "latest"), (3, "vllm"), (4, "fixed"), (4, "uniform"), (5, "bandit"),
    ]


@pytest.mark.parametrize("key", sorted(KEYS))
def test_no_module_compares_a_registry_name_outside_its_registry(key):
    registry = KEYS[key]
    names = set(registry.names())
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        entries = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "register"
                   and getattr(n.func.value, "id", None) in REGISTRIES and n.args and isinstance(n.args[0], ast.Constant)}  # a literal name
        bad += [f"{path.relative_to(SRC)}:{line}: {name!r}" for line, name in compared_names(tree, names - entries, key.split('.')[-1])]
    assert not bad, f"{key}'s names compared outside its registry (declare a need instead): {bad}"
