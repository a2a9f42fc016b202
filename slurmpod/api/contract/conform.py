"""Output shaping: a handler's response checked against, and conformed to, the operation's output shape."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import Enum

import botocore.model

from slurmpod.api.contract.model import get_model


class OutputShapeError(Exception):
    """A response does not conform to the operation's output shape (a programming error)."""


def _epoch(value: datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


#: where a value sits in the response: "" (the top), or (parent path, member name or list index); only an error
#: spells it out, so a 10,000-member response builds no path strings
Path = tuple[object, object] | str


def _spell(path: Path) -> str:
    if not isinstance(path, tuple):
        return path
    parent, key = path
    head = _spell(parent)  # type: ignore[arg-type]
    if isinstance(key, int):
        return f"{head}[{key}]"
    if isinstance(key, str) and key[:1] in ("<", "["):  # a map's key or value
        return f"{head}{key}"
    return f"{head}.{key}" if head else str(key)


def _conform(shape: botocore.model.Shape, value: object, at: Path) -> object:
    kind = shape.type_name
    if isinstance(value, Enum):
        value = value.value
    if kind == "structure":
        if not isinstance(value, Mapping):
            raise OutputShapeError(f"{_spell(at) or shape.name}: expected {shape.name}, got {value!r:.80}")
        members = shape.members
        out: dict[str, object] = {}
        for name, item in value.items():
            if name not in members:
                raise OutputShapeError(f"{_spell(at) or shape.name}: unknown member {name!r} of {shape.name}")
            if item is not None:
                out[name] = _conform(members[name], item, (at, name))
        missing = [name for name in shape.required_members if name not in out]
        if missing:
            raise OutputShapeError(f"{_spell(at) or shape.name}: missing required {missing} of {shape.name}")
        return out
    if kind == "list":
        if not isinstance(value, list | tuple):
            raise OutputShapeError(f"{_spell(at)}: expected list, got {value!r:.80}")
        return [_conform(shape.member, item, (at, k)) for k, item in enumerate(value)]
    if kind == "map":
        if not isinstance(value, Mapping):
            raise OutputShapeError(f"{_spell(at)}: expected map, got {value!r:.80}")
        return {
            _conform(shape.key, k, (at, "<key>")): _conform(shape.value, v, (at, f"[{k!r}]"))
            for k, v in value.items()
        }
    if kind == "timestamp":
        if isinstance(value, datetime):
            return _epoch(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        raise OutputShapeError(f"{_spell(at)}: expected timestamp, got {value!r:.80}")
    if kind == "string":
        if not isinstance(value, str):
            raise OutputShapeError(f"{_spell(at)}: expected string, got {value!r:.80}")
        if shape.enum and value not in shape.enum:
            raise OutputShapeError(f"{_spell(at)}: {value!r} is not in enum {shape.name}")
        return str(value)
    if kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise OutputShapeError(f"{_spell(at)}: expected {kind}, got {value!r:.80}")
        return int(value)
    if kind in ("double", "float"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise OutputShapeError(f"{_spell(at)}: expected {kind}, got {value!r:.80}")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise OutputShapeError(f"{_spell(at)}: expected boolean, got {value!r:.80}")
        return value
    if kind == "blob":
        if isinstance(value, bytes | bytearray):
            return base64.b64encode(bytes(value)).decode("ascii")
        if isinstance(value, str):
            return value
        raise OutputShapeError(f"{_spell(at)}: expected blob, got {value!r:.80}")
    raise OutputShapeError(f"{_spell(at)}: unsupported shape type {kind}")


def conform_output(operation: str, data: Mapping[str, object]) -> dict[str, object]:
    """Shapes a response for the wire: drops None members, turns datetimes into epoch seconds.

    Enum instances become their values; empty containers are kept.

    Raises:
        OutputShapeError: a member is unknown, a required member is missing, or a value has the wrong
            type or an enum value the model does not list.
        UnknownOperationException: the operation is not in the model.
    """
    shape = get_model().output_shape(operation)
    if shape is None:
        if data:
            raise OutputShapeError(f"{operation} has no output shape but got {sorted(data)}")
        return {}
    result = _conform(shape, data, "")
    if not isinstance(result, dict):  # pragma: no cover - _conform returns a dict for structures
        raise OutputShapeError(f"{operation}: output is not a structure")
    return result
