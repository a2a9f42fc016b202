"""The only way a record changes status: through the transition tables of ``domain.status``.

``node_to``/``cluster_to`` return a copy with the new status (and any other field changes) after checking the
edge; a forbidden edge raises ``InvalidTransitionError`` (a programming error: tests fail loudly). Code that
writes records never sets ``status=`` by hand (``tests/domain/test_transitions.py`` scans the package).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import ClusterStatus, InstanceStatus, check_cluster_transition, check_instance_transition


def node_to(node: NodeRecord, status: InstanceStatus, **changes: Any) -> NodeRecord:
    check_instance_transition(node.status, status)
    return replace(node, status=status, **changes)


def cluster_to(cluster: ClusterRecord, status: ClusterStatus, **changes: Any) -> ClusterRecord:
    check_cluster_transition(cluster.status, status)
    return replace(cluster, status=status, **changes)
