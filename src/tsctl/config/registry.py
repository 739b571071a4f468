"""Named implementations of a config value: the one registry helper.

A config key that names an implementation (``algo.aggregation``, ``truncation``, ``task.name``,
``engine.name``, ``seeds.selector``, ``seeds.source``) has a :class:`Registry`: implementations
register under their name with :meth:`Registry.register`, declaring what they need (the keyword
arguments the registry lists, e.g. ``SELECTORS.register("bandit", pool=True, arm_log=True)``);
callers look them up with :meth:`Registry.get` and :meth:`Registry.needs`, and config checking lists
:meth:`Registry.names`. Nothing outside a registry compares its names: callers read the needs.

**Discovery.** A registry made with ``package`` (its owner passes its own ``__package__``) imports
every module of that package before it lists its names or reports a name missing, so an entry is
one new module anywhere in the package, registering itself; no list of modules is kept.

**Settings blocks.** A registry made with ``key`` (the config key that names its entries, ``algo.policy_loss``)
lets an entry declare ``settings``: a dataclass of its own settings, defined beside the entry. Its keys live at
``<section>.<name>.*`` (``algo.cispo.*``: the section of ``key``, then the entry's name); the command's composition
adds every declared block to the schema (:func:`tsctl.config.blocks.with_blocks`), and :meth:`Registry.settings`
gives the entry its block.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import SimpleNamespace
from typing import Any, Callable, Generic, Optional, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Implementations of one kind (``policy loss``, ``truncation strategy``, ...) by name.

    Args:
        kind: what an entry is, in error messages (``unknown policy loss 'x'; valid: dapo, grpo``).
        package: the package whose modules hold the entries (imported on discovery); None: entries
            register where the registry is defined.
        key: the config key whose value names an entry (``algo.policy_loss``); with it an entry may also declare
            ``settings``, the dataclass of its settings block at ``<section of key>.<name>``.
        needs: what an entry may declare, with the value of an entry that declares nothing.
    """

    def __init__(self, kind: str, package: str | None = None, *, key: Optional[str] = None, **needs: Any) -> None:
        self.kind, self.package, self.key = kind, package, key
        self.defaults = {**needs, "settings": None} if key is not None else needs
        self._entries: dict[str, T] = {}
        self._needs: dict[str, SimpleNamespace] = {}

    def register(self, name: str, **needs: Any) -> Callable[[T], T]:
        """Decorator adding its argument under ``name`` with its declared ``needs``; a name registers once."""
        unknown = sorted(set(needs) - set(self.defaults))
        if unknown:
            raise TypeError(f"{self.kind} {name!r} declares {', '.join(unknown)}; a {self.kind} declares {', '.join(self.defaults) or 'nothing'}")

        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = entry
            self._needs[name] = SimpleNamespace(**{**self.defaults, **needs})
            return entry

        return add

    def get(self, name: str) -> T:
        """The entry called ``name``; ValueError naming the valid ones otherwise."""
        if name not in self._entries:
            self.discover()
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(self._entries)}") from None

    def needs(self, name: str) -> SimpleNamespace:
        """What the entry called ``name`` declared (the registry's defaults for the rest)."""
        self.get(name)
        return self._needs[name]

    @property
    def section(self) -> Optional[str]:
        """The config section the entries' settings blocks live in (``algo`` for ``algo.policy_loss``); None without ``key``
        or for a top-level key."""
        if self.key is None or "." not in self.key:
            return None
        return self.key.rpartition(".")[0]

    def settings(self, name: str, section: Any) -> Any:
        """The settings block of the entry ``name`` as the config ``section`` (``cfg.algo``) holds it, or its declared
        dataclass's defaults where the section holds none (a config built without the command's composition); None for
        an entry that declares no settings."""
        block_type = getattr(self.needs(name), "settings", None)
        if block_type is None:
            return None
        block = getattr(section, name, None)
        return block_type() if block is None else block

    def arguments(self, name: str, section: Any) -> dict[str, Any]:
        """The keyword arguments the entry ``name`` takes from its config ``section`` (``cfg.algo``): each key it declares
        it ``reads``, and ``settings`` (its block, :meth:`settings`) when it declares one."""
        out = {key: getattr(section, key) for key in getattr(self.needs(name), "reads", ())}
        block = self.settings(name, section)
        if block is not None:
            out["settings"] = block
        return out

    def blocks(self) -> dict[str, type]:
        """Each entry that declares ``settings`` -> its dataclass, in registration order."""
        return {name: self._needs[name].settings for name in self.names() if getattr(self._needs[name], "settings", None) is not None}

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order (discovered modules are imported in name order)."""
        self.discover()
        return tuple(self._entries)

    def discover(self) -> None:
        """Import every module of ``package`` (each registers its entries once, on its first import)."""
        if self.package is None:
            return
        for module in pkgutil.iter_modules(importlib.import_module(self.package).__path__):
            importlib.import_module(f"{self.package}.{module.name}")
