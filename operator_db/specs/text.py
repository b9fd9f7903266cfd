"""One rule for every stored free text: printable characters only, and names that look alike.

Text a spec or a request stores is shown on pages and terminals: a bidi override (U+202E) in a
spec's ``reference`` reversed the model page's own links, and a zero-width joiner hides inside a
name. No stored text holds a character of the categories ``NOT_IN_TEXT`` (controls, formats such
as bidi overrides and zero-width characters, line and paragraph separators, private use,
surrogates); prose and free-form JSON strings may hold newlines and tabs (``lines=True``).

A new device kind's name is also compared with the known ones by :func:`skeleton` (NFKC, case
folded, Cyrillic and Greek look-alikes read as Latin, ``o`` as ``0``, ``l`` and ``i`` as ``1``):
``Tesla Т4`` (a Cyrillic Т) and ``NVIDIA H1OO`` are refused beside ``Tesla T4`` and ``NVIDIA
H100`` where a request names a new kind (``db/queries/devices.py``); a worker registers its
device's own name as it is.
"""

from __future__ import annotations

import unicodedata

CATEGORIES = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Co": "a private-use character",
    "Cs": "a surrogate",
}
NOT_IN_TEXT = frozenset(CATEGORIES)
"""Unicode categories no stored text holds."""
LINE_BREAKS = frozenset("\n\t\r")
"""What prose and JSON strings may hold of the controls."""


def text_problem(value: str, *, lines: bool = False) -> str | None:
    """Return what is wrong with ``value`` as stored text (its first character at fault), or None.

    ``lines``: newlines and tabs are allowed (prose, JSON strings).
    """
    for char in value:
        category = unicodedata.category(char)
        if category in NOT_IN_TEXT and not (lines and char in LINE_BREAKS):
            called = unicodedata.name(char, "")
            return (
                f"holds {CATEGORIES[category]} U+{ord(char):04X}{f' ({called})' if called else ''}"
                ": text holds printable characters only"
            )
    return None


def printable(value: str) -> str:
    """Return ``value`` if it holds printable characters only (one line), else raise.

    Raises:
        ValueError: naming the first character at fault.
    """
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def printable_lines(value: str) -> str:
    """Return ``value`` if it holds printable characters, newlines and tabs only, else raise.

    Raises:
        ValueError: naming the first character at fault.
    """
    problem = text_problem(value, lines=True)
    if problem is not None:
        raise ValueError(problem)
    return value


_LOOK_ALIKES = str.maketrans(
    {
        # Cyrillic
        "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p",
        "с": "c", "т": "t", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d",
        "ɡ": "g", "ԛ": "q", "ԝ": "w",
        # Greek
        "α": "a", "β": "b", "ε": "e", "ζ": "z", "η": "n", "ι": "i", "κ": "k", "μ": "m",
        "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x",
        # digits and letters that pass for each other
        "o": "0", "l": "1", "i": "1", "|": "1", "\u00a0": " ",
    }
)  # fmt: skip


def skeleton(name: str) -> str:
    """Return what ``name`` looks like: two names with one skeleton pass for each other."""
    return unicodedata.normalize("NFKC", name).casefold().translate(_LOOK_ALIKES)
