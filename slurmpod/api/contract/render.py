"""Rendering values the way AWS messages show them (Java toString-like, truncated)."""

from __future__ import annotations

from collections.abc import Mapping

RENDER_LIMIT = 200
"""Rendered values in findings are truncated to about this many characters."""


class _Full(Exception):
    pass


def _render_into(value: object, out: list[str], budget: list[int], depth: int) -> None:
    def emit(text: str) -> None:
        out.append(text[: budget[0] + 1])
        budget[0] -= len(text)
        if budget[0] < 0:
            raise _Full

    if depth > 8:
        emit("...")
    elif value is None:
        emit("null")
    elif isinstance(value, bool):
        emit("true" if value else "false")
    elif isinstance(value, str):
        emit(value)
    elif isinstance(value, int | float):
        emit(repr(value))
    elif isinstance(value, list | tuple):
        emit("[")
        for k, item in enumerate(value):
            if k:
                emit(", ")
            _render_into(item, out, budget, depth + 1)
        emit("]")
    elif isinstance(value, Mapping):
        emit("{")
        for k, (key, item) in enumerate(value.items()):
            emit(f"{', ' if k else ''}{key}=")
            _render_into(item, out, budget, depth + 1)
        emit("}")
    else:
        emit(str(value))


def render_value(value: object) -> str:
    """``null`` or ``'text'``; long renderings are cut to about ``RENDER_LIMIT`` characters."""
    if value is None:
        return "null"
    out: list[str] = []
    try:
        _render_into(value, out, [RENDER_LIMIT], 0)
        text = "".join(out)
    except _Full:
        text = "".join(out)[: RENDER_LIMIT - 3] + "..."
    return f"'{text}'"
