"""The phrasings that state a null result as an equivalence, which the report, the results page and the README never
use (:mod:`tsctl.analysis.wording` says how a comparison is put into words instead)."""

from __future__ import annotations

import re

FORBIDDEN = (
    r"\bno effect\b",
    r"\bno difference\b",
    r"\bneither helps? nor hurts?\b",
    r"\bwithin the seed( and problem)? spread\b",
    r"\bequivalent\b(?! within ±)",
)
"""Patterns (case-insensitive) of the phrasings that state a null result as an equivalence."""


def forbidden_phrasings(text: str) -> list[str]:
    """The phrasings of ``text`` that :data:`FORBIDDEN` rules out, as found."""
    return [m.group(0) for pattern in FORBIDDEN for m in re.finditer(pattern, text, flags=re.IGNORECASE)]
