"""Which server should reconcile a cluster (pure): reachability, then rendezvous hashing for the spread.

A server may own a cluster when it runs the cluster's provider and reaches its nodes: a cluster pinned to a
machine (``home``: local nodes live on one machine) only by servers of that machine; an unpinned one (simulated,
or nodes reachable over the network) by any. Among the servers that may, the preferred one is the highest
``sha256(cluster id, replica id)``: every server computes the same answer from the same replica list, clusters
spread evenly, and losing (or adding) a server moves only the clusters it held (or gains).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Candidate", "may_own", "preferred", "unreachable_reason"]


@dataclass(frozen=True)
class Candidate:
    replica_id: str
    machine: str
    provider: str


def unreachable_reason(candidate: Candidate, provider: str, home: str | None) -> str | None:
    """Why ``candidate`` may not own a cluster of ``provider`` pinned to ``home`` (None: it may)."""
    if provider != candidate.provider:
        return f"its nodes are on the {provider} provider; this server runs the {candidate.provider} provider"
    if home is not None and home != candidate.machine:
        return f"its nodes are local nodes of machine {home}; this server runs on machine {candidate.machine}"
    return None


def may_own(candidate: Candidate, provider: str, home: str | None) -> bool:
    return unreachable_reason(candidate, provider, home) is None


def _score(cluster_id: str, replica_id: str) -> bytes:
    return hashlib.sha256(f"{cluster_id}\0{replica_id}".encode()).digest()


def preferred(cluster_id: str, provider: str, home: str | None, live: Sequence[Candidate]) -> str | None:
    """The replica id that should own the cluster among ``live`` (None: no live server may)."""
    able = [c.replica_id for c in live if may_own(c, provider, home)]
    return max(able, key=lambda rid: _score(cluster_id, rid)) if able else None
