"""Named implementations of a config value: the one registry helper.

A config key that names an implementation (``algo.loss``, ``truncation``, ``task.name``,
``engine.name``, ``seeds.selector``, ``seeds.source``) has a :class:`Registry`: implementations
register under their name with :meth:`Registry.register`, callers look them up with
:meth:`Registry.get`, and config checking lists :meth:`Registry.names` (in registration order).
"""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Implementations of one kind (``policy loss``, ``truncation strategy``, ...) by name.

    Args:
        kind: what an entry is, in error messages (``unknown policy loss 'x'; valid: dapo, grpo``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding its argument under ``name``; a name registers once."""

        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = entry
            return entry

        return add

    def get(self, name: str) -> T:
        """The entry called ``name``; ValueError naming the valid ones otherwise."""
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(self._entries)}") from None

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._entries)
