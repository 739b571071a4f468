"""The small checks every config check is made of; each raises a one-line :class:`ConfigError` naming the key."""

from __future__ import annotations

from collections.abc import Iterable

from tsctl.config.errors import ConfigError


def one_of(key: str, value: str, allowed: Iterable[str]) -> None:
    """Raise :class:`ConfigError` unless ``value`` (of ``key``) is one of ``allowed``."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(key, f"unknown value {value!r}; choose one of {', '.join(allowed)}")


def in_range(key: str, value: float, lo: float, hi: float, what: str = "") -> None:
    """Raise unless ``lo <= value <= hi``; ``what`` says what the key means."""
    if not lo <= value <= hi:
        raise ConfigError(key, f"{value} is out of range; allowed: {lo} <= {key} <= {hi}{what}")


def positive(key: str, value: float) -> None:
    """Raise unless ``value > 0``."""
    if value <= 0:
        raise ConfigError(key, f"{value} must be > 0")


def non_negative(key: str, value: float) -> None:
    """Raise unless ``value >= 0``."""
    if value < 0:
        raise ConfigError(key, f"{value} must be >= 0")
