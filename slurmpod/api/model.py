"""The botocore SageMaker model as the API contract: input validation and output shaping.

Validation walks an operation's input shape and collects every finding in AWS wording, e.g.
``Value 'ml.x' at 'instanceGroups.1.member.instanceType' failed to satisfy constraint: Member must
satisfy enum value set: [...]``. Paths use lowerCamelCase member names, ``.N.member`` (1-based) for list
items and ``.entry.N.key`` / ``.entry.N.value`` for map entries.

Findings come in two kinds. AWS's JSON front end rejects a body it cannot deserialize (wrong JSON type,
unknown member, body not an object) with ``SerializationException`` before any constraint is checked,
and everything else with ``ValidationException``. :func:`check_input` returns typed :class:`Finding` values
so callers can tell the two apart; :func:`raise_for_input` applies that rule and raises the right error.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
import re
import unicodedata
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Literal

import botocore.loaders
import botocore.model

from slurmpod.errors import (
    SerializationException,
    UnknownOperationException,
    ValidationException,
    validation_message,
)

log = logging.getLogger(__name__)

MAX_DEPTH = 64
"""Deeper nesting than this yields a single finding instead of recursing further."""
MAX_FINDINGS = 100
"""Validation stops collecting after this many findings."""
RENDER_LIMIT = 200
"""Rendered values in findings are truncated to about this many characters."""

FindingKind = Literal["validation", "serialization"]

_FILE_URI = re.compile(r"file:///[^\x00\r\n]+")
_EXTENSION_PATTERNS: dict[tuple[str, str], re.Pattern[str]] = {
    # slurmpod extension: lifecycle scripts may come from a local directory.
    ("ClusterLifeCycleConfig", "SourceS3Uri"): _FILE_URI,
}
_INT_RANGES = {"integer": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


class OutputShapeError(Exception):
    """A response does not conform to the operation's output shape (a programming error)."""


@dataclass(frozen=True)
class Finding:
    """One validation finding: the AWS-worded message and whether it is a serialization problem."""

    message: str
    kind: FindingKind = "validation"


class ServiceModel:
    """The SageMaker service model from the installed botocore, with convenience look-ups."""

    def __init__(self, model: botocore.model.ServiceModel) -> None:
        self._model = model
        self._operations = frozenset(model.operation_names)

    @classmethod
    def load(cls) -> ServiceModel:
        """Loads ``sagemaker/service-2`` from botocore's bundled data."""
        data = botocore.loaders.Loader().load_service_model("sagemaker", "service-2")
        return cls(botocore.model.ServiceModel(data, service_name="sagemaker"))

    @property
    def botocore_model(self) -> botocore.model.ServiceModel:
        """The underlying botocore model."""
        return self._model

    @property
    def api_version(self) -> str:
        """The model's API version, e.g. ``2017-07-24``."""
        return str(self._model.api_version)

    def operation_names(self) -> frozenset[str]:
        """Every operation name in the model."""
        return self._operations

    def has_operation(self, name: str) -> bool:
        """Whether ``name`` is an operation of the model."""
        return name in self._operations

    def operation(self, name: str) -> botocore.model.OperationModel:
        """The operation model.

        Raises:
            UnknownOperationException: ``name`` is not in the model.
        """
        if name not in self._operations:
            raise UnknownOperationException(f"Unknown operation {name}")
        return self._model.operation_model(name)

    def input_shape(self, name: str) -> botocore.model.StructureShape | None:
        """The operation's input structure, or None when it takes no input."""
        return self.operation(name).input_shape

    def output_shape(self, name: str) -> botocore.model.StructureShape | None:
        """The operation's output structure, or None when it returns nothing."""
        return self.operation(name).output_shape

    def error_codes(self, name: str) -> frozenset[str]:
        """The error codes the model lists for the operation."""
        shapes = self.operation(name).error_shapes
        return frozenset(s.metadata.get("error", {}).get("code", s.name) for s in shapes)


@functools.cache
def get_model() -> ServiceModel:
    """The process-wide SageMaker model, loaded once."""
    return ServiceModel.load()


def operation_names() -> frozenset[str]:
    """Every SageMaker operation name in the installed botocore model."""
    return get_model().operation_names()


# --------------------------------------------------------------------------------------------------
# Java regular expressions -> Python


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


# --------------------------------------------------------------------------------------------------
# Rendering values the way AWS messages show them (Java toString-like, truncated)


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


# --------------------------------------------------------------------------------------------------
# Input validation


def _wire_name(member: str) -> str:
    return member[:1].lower() + member[1:]


def _join(path: str, member: str) -> str:
    return f"{path}.{_wire_name(member)}" if path else _wire_name(member)


def _java_length(text: str) -> int:
    """String length in UTF-16 code units, as Java counts it."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _is_timestamp(value: object) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return True
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            return False
        return True
    return False


class _Validator:
    """Walks one input value against its shape, collecting findings."""

    def __init__(self, extensions: bool) -> None:
        self.extensions = extensions
        self.findings: list[Finding] = []

    def add(self, message: str, kind: FindingKind = "validation") -> None:
        self.findings.append(Finding(message, kind))
        if len(self.findings) >= MAX_FINDINGS:
            raise _Full

    def constraint(self, value: object, path: str, text: str) -> None:
        self.add(f"Value {render_value(value)} at '{path}' failed to satisfy constraint: {text}")

    def wrong_type(self, value: object, path: str, type_name: str) -> None:
        self.add(
            f"Value {render_value(value)} at '{path}' failed to satisfy constraint: "
            f"Member must be of type {type_name}",
            "serialization",
        )

    def bounds(self, value: object, path: str, size: float, md: Mapping[str, Any], what: str) -> None:
        if "min" in md and size < md["min"]:
            self.constraint(value, path, f"Member must have {what} greater than or equal to {md['min']}")
        if "max" in md and size > md["max"]:
            self.constraint(value, path, f"Member must have {what} less than or equal to {md['max']}")

    def check(
        self, shape: botocore.model.Shape, value: object, path: str, depth: int, owner: tuple[str, str]
    ) -> None:
        """Checks one value; ``owner`` is (structure shape, member) of the nearest enclosing member."""
        if depth > MAX_DEPTH:
            self.add(f"Value at '{path}' failed to satisfy constraint: Member nesting exceeds {MAX_DEPTH}")
            return
        if value is None:
            self.constraint(None, path, "Member must not be null")
            return
        kind, md = shape.type_name, shape.metadata
        if kind == "structure":
            self.structure(shape, value, path, depth)
        elif kind == "list":
            if not isinstance(value, list):
                return self.wrong_type(value, path, "list")
            self.bounds(value, path, len(value), md, "length")
            for k, item in enumerate(value, 1):
                self.check(shape.member, item, f"{path}.{k}.member", depth + 1, owner)
        elif kind == "map":
            if not isinstance(value, Mapping):
                return self.wrong_type(value, path, "map")
            self.bounds(value, path, len(value), md, "length")
            for k, (key, item) in enumerate(value.items(), 1):
                self.check(shape.key, key, f"{path}.entry.{k}.key", depth + 1, owner)
                self.check(shape.value, item, f"{path}.entry.{k}.value", depth + 1, owner)
        elif kind == "string":
            self.string(shape, value, path, owner)
        elif kind in ("integer", "long"):
            lo, hi = _INT_RANGES[kind]
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                return self.wrong_type(value, path, kind)
            self.bounds(value, path, value, md, "value")
        elif kind in ("double", "float"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                return self.wrong_type(value, path, kind)
            self.bounds(value, path, value, md, "value")
        elif kind == "boolean":
            if not isinstance(value, bool):
                self.wrong_type(value, path, "boolean")
        elif kind == "timestamp":
            if not _is_timestamp(value):
                self.wrong_type(value, path, "timestamp")
        elif kind == "blob":
            try:
                data = base64.b64decode(value, validate=True) if isinstance(value, str) else None
            except (binascii.Error, ValueError):
                data = None
            if data is None:
                return self.wrong_type(value, path, "blob")
            self.bounds(value, path, len(data), md, "length")

    def string(self, shape: botocore.model.Shape, value: object, path: str, owner: tuple[str, str]) -> None:
        if not isinstance(value, str):
            return self.wrong_type(value, path, "string")
        md = shape.metadata
        length = _java_length(value)
        self.bounds(value, path, length, md, "length")
        pattern = md.get("pattern")
        if pattern is not None and length <= md.get("max", 65536):
            extra = _EXTENSION_PATTERNS.get(owner) if self.extensions else None
            compiled = compile_pattern(pattern)
            if compiled is not None and compiled.fullmatch(value) is None:
                if extra is None or extra.fullmatch(value) is None:
                    self.constraint(value, path, f"Member must satisfy regular expression pattern: {pattern}")
        enum = shape.enum
        if enum and value not in enum:
            self.constraint(value, path, f"Member must satisfy enum value set: [{', '.join(enum)}]")

    def structure(self, shape: botocore.model.StructureShape, value: object, path: str, depth: int) -> None:
        if not isinstance(value, Mapping):
            return self.wrong_type(value, path, "structure")
        members = shape.members
        for name in value:
            if name not in members:
                where = f" at '{path}'" if path else ""
                self.add(f"Unknown member {render_value(str(name))}{where}", "serialization")
        required = set(shape.required_members)
        for name, member in members.items():
            item = value.get(name)
            if item is None:
                if name in required:
                    self.constraint(None, _join(path, name), "Member must not be null")
                continue
            self.check(member, item, _join(path, name), depth + 1, (shape.name, name))
        if shape.metadata.get("union"):
            count = sum(1 for name in members if value.get(name) is not None)
            if count != 1:
                self.constraint(value, path, "Member must have exactly one member set")


def check_input(operation: str, params: object, *, extensions: bool = True) -> list[Finding]:
    """Validates ``params`` against the operation's input shape; returns typed findings (model order).

    Raises:
        UnknownOperationException: the operation is not in the model.
    """
    shape = get_model().input_shape(operation)
    validator = _Validator(extensions)
    try:
        if not isinstance(params, Mapping):
            validator.add("Request body must be a JSON object", "serialization")
        elif shape is None:
            for name in params:
                validator.add(f"Unknown member {render_value(str(name))}", "serialization")
        else:
            validator.structure(shape, params, "", 0)
    except _Full:
        pass
    return validator.findings


def validate_input(operation: str, params: object, *, extensions: bool = True) -> list[str]:
    """AWS-worded findings for ``params`` (empty when valid). See :func:`check_input`."""
    return [f.message for f in check_input(operation, params, extensions=extensions)]


def format_validation_error(findings: list[str]) -> str:
    """``1 validation error detected: f`` / ``N validation errors detected: a; b``."""
    return validation_message(findings)


def raise_for_input(operation: str, params: object, *, extensions: bool = True) -> None:
    """Raises the error AWS would answer with, or returns when the input is valid.

    Raises:
        SerializationException: some finding is a deserialization problem (wrong JSON type, unknown
            member, body not an object); the message joins those findings with ``; ``.
        ValidationException: constraint findings only; AWS's ``N validation errors detected`` message.
        UnknownOperationException: the operation is not in the model.
    """
    findings = check_input(operation, params, extensions=extensions)
    serialization = [f.message for f in findings if f.kind == "serialization"]
    if serialization:
        raise SerializationException("; ".join(serialization))
    if findings:
        raise ValidationException(format_validation_error([f.message for f in findings]))


# --------------------------------------------------------------------------------------------------
# Output shaping


def _epoch(value: datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def _conform(shape: botocore.model.Shape, value: object, path: str) -> object:
    kind = shape.type_name
    if isinstance(value, Enum):
        value = value.value
    if kind == "structure":
        if not isinstance(value, Mapping):
            raise OutputShapeError(f"{path or shape.name}: expected {shape.name}, got {value!r:.80}")
        members = shape.members
        out: dict[str, object] = {}
        for name, item in value.items():
            if name not in members:
                raise OutputShapeError(f"{path or shape.name}: unknown member {name!r} of {shape.name}")
            if item is not None:
                out[name] = _conform(members[name], item, f"{path}.{name}" if path else name)
        missing = [name for name in shape.required_members if name not in out]
        if missing:
            raise OutputShapeError(f"{path or shape.name}: missing required {missing} of {shape.name}")
        return out
    if kind == "list":
        if not isinstance(value, list | tuple):
            raise OutputShapeError(f"{path}: expected list, got {value!r:.80}")
        return [_conform(shape.member, item, f"{path}[{k}]") for k, item in enumerate(value)]
    if kind == "map":
        if not isinstance(value, Mapping):
            raise OutputShapeError(f"{path}: expected map, got {value!r:.80}")
        return {
            _conform(shape.key, k, f"{path}<key>"): _conform(shape.value, v, f"{path}[{k!r}]")
            for k, v in value.items()
        }
    if kind == "timestamp":
        if isinstance(value, datetime):
            return _epoch(value)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        raise OutputShapeError(f"{path}: expected timestamp, got {value!r:.80}")
    if kind == "string":
        if not isinstance(value, str):
            raise OutputShapeError(f"{path}: expected string, got {value!r:.80}")
        if shape.enum and value not in shape.enum:
            raise OutputShapeError(f"{path}: {value!r} is not in enum {shape.name}")
        return str(value)
    if kind in ("integer", "long"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise OutputShapeError(f"{path}: expected {kind}, got {value!r:.80}")
        return int(value)
    if kind in ("double", "float"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise OutputShapeError(f"{path}: expected {kind}, got {value!r:.80}")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise OutputShapeError(f"{path}: expected boolean, got {value!r:.80}")
        return value
    if kind == "blob":
        if isinstance(value, bytes | bytearray):
            return base64.b64encode(bytes(value)).decode("ascii")
        if isinstance(value, str):
            return value
        raise OutputShapeError(f"{path}: expected blob, got {value!r:.80}")
    raise OutputShapeError(f"{path}: unsupported shape type {kind}")


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
