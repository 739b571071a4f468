"""Named implementations of a config value: the one registry helper.

A config key that names an implementation (``algo.loss``, ``truncation``, ``task.name``,
``engine.name``, ``seeds.selector``, ``seeds.source``) has a :class:`Registry`: implementations
register under their name with :meth:`Registry.register`, declaring what they need (the keyword
arguments the registry lists, e.g. ``SELECTORS.register("bandit", pool=True, arm_log=True)``);
callers look them up with :meth:`Registry.get` and :meth:`Registry.needs`, and config checking lists
:meth:`Registry.names`. Nothing outside a registry compares its names: callers read the needs.

**Discovery.** A registry made with ``package`` (its owner passes its own ``__package__``) imports
every module of that package before it lists its names or reports a name missing, so an entry is
one new module anywhere in the package, registering itself; no list of modules is kept.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import SimpleNamespace
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Implementations of one kind (``policy loss``, ``truncation strategy``, ...) by name.

    Args:
        kind: what an entry is, in error messages (``unknown policy loss 'x'; valid: dapo, grpo``).
        package: the package whose modules hold the entries (imported on discovery); None: entries
            register where the registry is defined.
        needs: what an entry may declare, with the value of an entry that declares nothing.
    """

    def __init__(self, kind: str, package: str | None = None, **needs: Any) -> None:
        self.kind, self.package, self.defaults = kind, package, needs
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
