"""Every status change goes through the transition tables; a forbidden one raises."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from slurmpod.domain.model import NodeRecord
from slurmpod.domain.status import InstanceStatus, InvalidTransitionError
from slurmpod.domain.transitions import node_to

PACKAGE = Path(__file__).resolve().parents[2] / "slurmpod"


def test_forbidden_transition_raises() -> None:
    failed = NodeRecord(instance_id="i-1", cluster_id="c", group="g", seq=1, status=InstanceStatus.FAILURE,
                        launch_time=0.0)
    with pytest.raises(InvalidTransitionError, match="Failure -> SystemUpdating"):
        node_to(failed, InstanceStatus.SYSTEM_UPDATING)
    assert node_to(failed, InstanceStatus.PENDING).status == InstanceStatus.PENDING


def test_no_status_is_set_by_hand() -> None:
    """``dataclasses.replace(record, status=...)`` bypasses the tables: only domain/transitions.py may do it."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "transitions.py" and path.parent.name == "domain":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "replace"
                    and any(k.arg == "status" for k in node.keywords)):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert offenders == []
