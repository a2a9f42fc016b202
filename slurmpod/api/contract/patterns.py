"""Java regular expressions (the botocore model's ``pattern`` traits) translated to Python ``re``."""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
import warnings

log = logging.getLogger(__name__)


class _Untranslatable(ValueError):
    """A Java regex construct with no Python translation here."""


_CATEGORY_GROUPS = {
    "L": ("Lu", "Ll", "Lt", "Lm", "Lo"),
    "M": ("Mn", "Mc", "Me"),
    "N": ("Nd", "Nl", "No"),
    "P": ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"),
    "S": ("Sm", "Sc", "Sk", "So"),
    "Z": ("Zs", "Zl", "Zp"),
    "C": ("Cc", "Cf", "Co", "Cn"),
}
_POSIX_CLASSES = {
    "Alnum": "a-zA-Z0-9",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Upper": "A-Z",
    "Lower": "a-z",
    "XDigit": "0-9a-fA-F",
    "Space": r" \t\n\x0b\f\r",
    "Punct": r"!-/:-@\[-`{-~",
    "ASCII": r"\x00-\x7f",
}


@functools.cache
def _category_table() -> dict[str, list[tuple[int, int]]]:
    """Code-point ranges per Unicode general category (one pass, cached)."""
    table: dict[str, list[tuple[int, int]]] = {}
    prev, start = "", 0
    for cp in range(0x110000):
        cat = "Cs" if 0xD800 <= cp <= 0xDFFF else unicodedata.category(chr(cp))
        if cat != prev:
            if prev:
                table.setdefault(prev, []).append((start, cp - 1))
            prev, start = cat, cp
    table.setdefault(prev, []).append((start, 0x10FFFF))
    return table


def _property_class(name: str) -> str:
    """The body of a Python character class for Java's ``\\p{name}``."""
    if name in _POSIX_CLASSES:
        return _POSIX_CLASSES[name]
    cats = _CATEGORY_GROUPS.get(name) or ((name,) if len(name) == 2 and name[0] in _CATEGORY_GROUPS else None)
    if cats is None:
        raise _Untranslatable(f"\\p{{{name}}}")
    table = _category_table()
    ranges = sorted(r for cat in cats for r in table.get(cat, []))
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


def _translate(pattern: str) -> str:
    """Rewrites the Java-only constructs the model uses (``\\p{..}``, surrogate pairs, ``${n,m}``)."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt in "pP":
                if i + 2 < n and pattern[i + 2] == "{":
                    end = pattern.index("}", i + 2)
                    name, i = pattern[i + 3 : end], end + 1
                else:
                    name, i = pattern[i + 2 : i + 3], i + 3
                body = _property_class(name)
                if nxt == "P" and in_class:
                    raise _Untranslatable("\\P inside a character class")
                out.append(body if in_class else f"[{'^' if nxt == 'P' else ''}{body}]")
                continue
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", pattern[i + 2 : i + 6]):
                cp, i = int(pattern[i + 2 : i + 6], 16), i + 6
                low = pattern[i + 2 : i + 6] if pattern.startswith("\\u", i) else ""
                if 0xD800 <= cp <= 0xDBFF and re.fullmatch(r"[dD][c-fC-F][0-9a-fA-F]{2}", low):
                    cp, i = 0x10000 + ((cp - 0xD800) << 10) + (int(low, 16) - 0xDC00), i + 6
                out.append(f"\\U{cp:08x}")
                continue
            if nxt == "z":
                out.append("\\Z")
            elif nxt in "QEhHRXGvV":
                raise _Untranslatable(f"\\{nxt}")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            if pattern[j : j + 1] == "]":  # a leading ']' is literal in a class
                out.append(pattern[i:j] + "\\]")
                i = j + 1
                continue
        elif c == "$" and (m := re.match(r"\{\d+(,\d*)?\}", pattern[i + 1 :])):
            out.append("$")  # Java tolerates a quantified end anchor; it means just the anchor
            i += 1 + m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


@functools.cache
def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """Compiles a model (Java) pattern for ``fullmatch``; None when it cannot be translated."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return re.compile(_translate(pattern), re.ASCII)
    except (_Untranslatable, re.error, ValueError) as exc:
        log.warning("model pattern %r not enforced: %s", pattern, exc)
        return None
