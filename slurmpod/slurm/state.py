"""Node state as Slurm 22.05 reports it (``sinfo --json``), parsed into plain values.

Debian's 22.05 ``scontrol`` has no ``--json``; ``sinfo --json`` (openapi v0.0.38) gives one object per
node with its partitions. It reports ``state`` as the base state in lower case ("idle", "allocated",
"mixed", "down", "unknown", "future") and ``state_flags`` as a list of upper-case flags ("DRAIN",
"NOT_RESPONDING", "DYNAMIC_NORM", "COMPLETING" ...). ``SlurmNode.states`` holds both, upper-cased:
``frozenset({"IDLE", "DRAIN", "DYNAMIC_NORM"})``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

BASE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
_USABLE = frozenset({"IDLE", "ALLOCATED", "MIXED", "COMPLETING"})
_UNUSABLE_FLAGS = frozenset(
    {"NOT_RESPONDING", "INVALID_REG", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "FAIL"}
)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    states: frozenset[str]
    reason: str | None = None
    addr: str | None = None
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    cpus: int = 0
    real_memory: int = 0

    def is_idle(self) -> bool:
        return "IDLE" in self.states and not self.has_jobs()

    def is_allocated(self) -> bool:
        return bool({"ALLOCATED", "MIXED"} & self.states)

    def has_jobs(self) -> bool:
        return bool({"ALLOCATED", "MIXED", "COMPLETING"} & self.states)

    def is_drained(self) -> bool:
        """Drain requested and no job left (``drained``); see ``is_draining`` for jobs still running."""
        return "DRAIN" in self.states and not self.has_jobs()

    def is_draining(self) -> bool:
        return "DRAIN" in self.states and self.has_jobs()

    def is_failed(self) -> bool:
        """Set to FAIL (``scontrol update state=fail``): no new jobs, an operator's request to act on it."""
        return "FAIL" in self.states

    def is_down(self) -> bool:
        return bool({"DOWN", "ERROR"} & self.states)

    def is_not_responding(self) -> bool:
        return "NOT_RESPONDING" in self.states

    def is_joined(self) -> bool:
        """Registered and usable: idle/allocated/mixed/completing, responding, not down.

        DRAIN does not count against joining (a drained node is registered); callers that need a
        schedulable node also check ``"DRAIN" not in states``.
        """
        return bool(_USABLE & self.states) and not self.is_down() and not (_UNUSABLE_FLAGS & self.states)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    if isinstance(value, Iterable):
        return [str(v) for v in value if v]
    return [str(value)]


def _int(value: Any) -> int:
    if isinstance(value, Mapping):  # newer data_parser versions: {"set": true, "number": N}
        value = value.get("number", 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def node_from_json(d: Mapping[str, Any]) -> SlurmNode:
    states = {s.upper() for s in _as_list(d.get("state"))}
    states |= {s.upper() for s in _as_list(d.get("state_flags"))}
    reason = d.get("reason") or None
    return SlurmNode(
        name=str(d.get("name") or d.get("hostname")),
        states=frozenset(states),
        reason=reason,
        addr=d.get("address") or None,
        features=tuple(_as_list(d.get("features") or d.get("active_features"))),
        partitions=tuple(_as_list(d.get("partitions"))),
        cpus=_int(d.get("cpus")),
        real_memory=_int(d.get("real_memory")),
    )


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    """``sinfo --json`` -> nodes (sorted by name). Raises ``ValueError`` on errors without nodes."""
    doc = json.loads(text)
    errors = doc.get("errors") or []
    if errors and not doc.get("nodes"):
        raise ValueError(f"scontrol reported errors: {errors}")
    return sorted((node_from_json(n) for n in doc.get("nodes") or []), key=lambda n: n.name)


def parse_scontrol_nodes_json(text: str) -> list[SlurmNode]:
    """``scontrol show nodes --json`` (Slurm >= 23.02; same node objects as sinfo) -> nodes."""
    return parse_sinfo_json(text)
