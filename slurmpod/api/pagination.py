"""Opaque, filter-bound NextToken pagination (keyset: stable under concurrent inserts)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from slurmpod.errors import ValidationException

T = TypeVar("T")


def _filters_hash(filters: Mapping[str, Any]) -> str:
    raw = json.dumps(filters, sort_keys=True, default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def encode_token(key: Sequence[Any], filters: Mapping[str, Any]) -> str:
    raw = json.dumps({"k": list(key), "f": _filters_hash(filters)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, filters: Mapping[str, Any]) -> list[Any]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        key, fh = data["k"], data["f"]
        if not isinstance(key, list):
            raise TypeError
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        raise ValidationException("Invalid pagination token: NextToken is malformed.") from exc
    if fh != _filters_hash(filters):
        raise ValidationException("Invalid pagination token: NextToken does not match the request parameters.")
    return key


def paginate(
    items: Sequence[T],
    sort_key: Callable[[T], tuple[Any, ...]],
    *,
    descending: bool,
    max_results: int | None,
    next_token: str | None,
    filters: Mapping[str, Any],
    default_max: int = 100,
) -> tuple[list[T], str | None]:
    """Sorts ``items`` by ``sort_key`` (which must end with a unique id) and returns one page."""
    ordered = sorted(items, key=sort_key, reverse=descending)
    if next_token:
        after = list(decode_token(next_token, filters))
        try:
            if descending:
                ordered = [i for i in ordered if list(sort_key(i)) < after]
            else:
                ordered = [i for i in ordered if list(sort_key(i)) > after]
        except TypeError as exc:  # a forged key whose types do not compare with ours
            raise ValidationException("Invalid pagination token: NextToken is malformed.") from exc
    limit = max_results or default_max
    page = ordered[:limit]
    token = encode_token(sort_key(page[-1]), filters) if len(ordered) > limit else None
    return page, token


def epoch(value: Any) -> float:
    """A modeled timestamp (epoch number or ISO-8601 string, already shape-checked) as epoch seconds."""
    from datetime import UTC, datetime

    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip().replace("Z", "+00:00").replace("z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValidationException(f"Value '{value}' is not a valid timestamp.") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
