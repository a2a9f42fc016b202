"""Input validation against the botocore model, collecting every finding in AWS wording.

Paths use lowerCamelCase member names, ``.N.member`` (1-based) for list items and ``.entry.N.key`` /
``.entry.N.value`` for map entries. Findings come in two kinds: AWS's JSON front end rejects a body it cannot
deserialize (wrong JSON type, unknown member, body not an object) with ``SerializationException`` before any
constraint is checked, and everything else with ``ValidationException``.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import botocore.model

from slurmpod.api.contract.model import get_model
from slurmpod.api.contract.patterns import compile_pattern
from slurmpod.api.contract.render import render_value
from slurmpod.errors import SerializationException, ValidationException, validation_message

MAX_DEPTH = 64
"""Deeper nesting than this yields a single finding instead of recursing further."""
MAX_FINDINGS = 100
"""Validation stops collecting after this many findings."""

FindingKind = Literal["validation", "serialization"]

_FILE_URI = re.compile(r"file:///[^\x00\r\n]+")
_EXTENSION_PATTERNS: dict[tuple[str, str], re.Pattern[str]] = {
    # slurmpod extension: lifecycle scripts may come from a local directory.
    ("ClusterLifeCycleConfig", "SourceS3Uri"): _FILE_URI,
}
_INT_RANGES = {"integer": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


class _Full(Exception):
    """MAX_FINDINGS reached: stop walking."""


@dataclass(frozen=True)
class Finding:
    """One validation finding: the AWS-worded message and whether it is a serialization problem."""

    message: str
    kind: FindingKind = "validation"


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
