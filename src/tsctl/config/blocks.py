"""The schema with the settings blocks registry entries declare: a policy loss, an engine or a task keeps its own
settings beside it, and they become keys of the config here.

An entry of a registry made with ``key`` may declare ``settings``, a dataclass (:mod:`tsctl.config.registry`); its
fields become the keys ``<section>.<name>.*`` (``algo.cispo.clip_max`` for the policy loss ``cispo``; ``engine.vllm.*``,
``task.countdown.*``). :func:`with_blocks` derives, from the root schema, a schema whose sections hold every declared
block, so Hydra refuses an unknown key or a value of the wrong type in a block as in any section, ``--cfg job`` shows
the blocks with their defaults, and a run's ``config.yaml`` records them. The derived classes subclass the schema's own
(a derived config is a :class:`~tsctl.config.schema.TsctlConfig`), and a config built without them (a test's
``TsctlConfig()``) gives every entry its block's defaults (:meth:`~tsctl.config.registry.Registry.settings`).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Iterable

from tsctl.config.registry import Registry


def with_blocks(schema: type, registries: Iterable[Registry]) -> type:
    """``schema`` (a dataclass such as :class:`~tsctl.config.schema.TsctlConfig`) with each section that some entry
    of ``registries`` keeps a settings block in replaced by a subclass holding those blocks; ``schema`` itself when none
    declares one.

    Raises:
        TypeError: a block's name is a key of its section already, or two entries declare blocks of one name there.
    """
    sections: dict[str, dict[str, type]] = {}
    for registry in registries:
        for name, block in registry.blocks().items():
            if registry.section is None:
                raise TypeError(f"{registry.kind} {name!r} declares settings, but its key {registry.key!r} has no section to hold them")
            taken = sections.setdefault(registry.section, {})
            if name in taken and taken[name] is not block:
                raise TypeError(f"{registry.kind} {name!r} declares settings at {registry.section}.{name}, which another entry holds")
            taken[name] = block
    return _derived(schema, tuple((section, tuple(blocks.items())) for section, blocks in sorted(sections.items())))


@functools.lru_cache(maxsize=None)
def _derived(schema: type, sections: tuple[tuple[str, tuple[tuple[str, type], ...]], ...]) -> type:
    """The derived schema of :func:`with_blocks`, one class per set of blocks (the same blocks, the same class)."""
    if not sections:
        return schema
    hints = typing.get_type_hints(schema)
    replaced = []
    for section, blocks in sections:
        base = hints[section]
        own = {f.name for f in dataclasses.fields(base)}
        if clash := [name for name, _ in blocks if name in own]:
            raise TypeError(f"a settings block named {clash[0]!r} would hide the key {section}.{clash[0]}")
        derived = _here(dataclasses.make_dataclass(base.__name__, [(name, block, dataclasses.field(default_factory=block)) for name, block in blocks], bases=(base,)))
        replaced.append((section, derived, dataclasses.field(default_factory=derived)))
    return _here(dataclasses.make_dataclass(schema.__name__, replaced, bases=(schema,)))


def _here(cls: type) -> type:
    """``cls``, named as defined in this module (it exists only as built here; a pickle carries it by value)."""
    cls.__module__ = __name__
    return cls
