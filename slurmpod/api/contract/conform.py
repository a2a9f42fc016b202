"""Output shaping: a handler's response checked against, and conformed to, the operation's output shape."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
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


Conformer = Callable[[object, Path], object]

# shape name -> its conformer, per model (a response of 100 node summaries visits ~1,000 values: the per-shape work,
# botocore's shape properties and the enum list, is done once, not per value)
_CONFORMERS: dict[tuple[int, str], Conformer] = {}


def _conformer(shape: botocore.model.Shape) -> Conformer:
    key = (id(get_model()), shape.name)
    hit = _CONFORMERS.get(key)
    if hit is None:
        hit = _CONFORMERS[key] = _build(shape)
    return hit


def _build(shape: botocore.model.Shape) -> Conformer:  # noqa: C901 - one branch per shape type, as the model has
    kind = shape.type_name
    if kind == "structure":
        name = shape.name
        members = dict(shape.members)  # type: ignore[attr-defined]
        required = tuple(shape.required_members)  # type: ignore[attr-defined]
        subs: dict[str, Conformer] = {}  # built on first use: shapes may refer to themselves

        def structure(value: object, at: Path) -> object:
            if value.__class__ is not dict:  # a plain dict (nearly always) is a Mapping and no Enum
                if isinstance(value, Enum):
                    value = value.value
                if not isinstance(value, Mapping):
                    raise OutputShapeError(f"{_spell(at) or name}: expected {name}, got {value!r:.80}")
            out: dict[str, object] = {}
            for member, item in value.items():
                sub = subs.get(member)
                if sub is None:
                    if member not in members:
                        raise OutputShapeError(f"{_spell(at) or name}: unknown member {member!r} of {name}")
                    sub = subs[member] = _conformer(members[member])
                if item is not None:
                    out[member] = sub(item, (at, member))
            for m in required:
                if m not in out:
                    missing = [m for m in required if m not in out]
                    raise OutputShapeError(f"{_spell(at) or name}: missing required {missing} of {name}")
            return out

        return structure
    if kind == "list":
        item_shape = shape.member  # type: ignore[attr-defined]

        def listing(value: object, at: Path) -> object:
            if isinstance(value, Enum):
                value = value.value
            if not isinstance(value, list | tuple):
                raise OutputShapeError(f"{_spell(at)}: expected list, got {value!r:.80}")
            sub = _conformer(item_shape)
            return [sub(item, (at, k)) for k, item in enumerate(value)]

        return listing
    if kind == "map":
        key_shape, value_shape = shape.key, shape.value  # type: ignore[attr-defined]

        def mapping(value: object, at: Path) -> object:
            if isinstance(value, Enum):
                value = value.value
            if not isinstance(value, Mapping):
                raise OutputShapeError(f"{_spell(at)}: expected map, got {value!r:.80}")
            ks, vs = _conformer(key_shape), _conformer(value_shape)
            return {ks(k, (at, "<key>")): vs(v, (at, f"[{k!r}]")) for k, v in value.items()}

        return mapping
    if kind == "string":
        enum = frozenset(shape.enum) if shape.enum else None  # type: ignore[attr-defined]
        shape_name = shape.name

        def string(value: object, at: Path) -> object:
            if value.__class__ is str and (enum is None or value in enum):
                return value
            if isinstance(value, Enum):
                value = value.value
            if not isinstance(value, str):
                raise OutputShapeError(f"{_spell(at)}: expected string, got {value!r:.80}")
            if enum is not None and value not in enum:
                raise OutputShapeError(f"{_spell(at)}: {value!r} is not in enum {shape_name}")
            return str(value)

        return string
    if kind in ("double", "float", "timestamp"):

        def number(value: object, at: Path) -> object:
            return value if value.__class__ is float else _scalar(kind, value, at)

        return number
    return lambda value, at: _scalar(kind, value, at)


def _scalar(kind: str, value: object, at: Path) -> object:
    if isinstance(value, Enum):
        value = value.value
    if kind == "timestamp":
        if isinstance(value, datetime):
            return _epoch(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        raise OutputShapeError(f"{_spell(at)}: expected timestamp, got {value!r:.80}")
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


def _conform(shape: botocore.model.Shape, value: object, at: Path) -> object:
    return _conformer(shape)(value, at)


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
