"""Helpers every ``slurmpod`` command shares: option values and the one-line error exit."""

from __future__ import annotations

import sys


def parse_capacity(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, _, value = part.partition("=")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise SystemExit(f"slurmpod: bad capacity entry {part!r}; use TYPE=COUNT[,TYPE=COUNT]") from None
    return out


def die(message: str) -> int:
    print(f"slurmpod: {message}", file=sys.stderr)
    return 2
