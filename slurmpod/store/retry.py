"""``retry_on_conflict``: the one optimistic read-change-write loop over a cluster record.

A change is decided from a fresh read and written with the version check (``ClusterRepo.update_cluster``).
Losing the race (``VersionConflict``) means someone else wrote in between: read again and decide again,
a bounded number of times, then give up with ``ConflictRetriesExhausted`` (the service reports it as
``ConflictException``: "being changed concurrently; retry").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from slurmpod.domain.model import ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.operations import ClientTokenRecord, OperationKind
from slurmpod.errors import VersionConflict
from slurmpod.store.protocol import ClusterRepo

__all__ = ["DEFAULT_ATTEMPTS", "ClusterWrite", "ConflictRetriesExhausted", "Retried", "retry_on_conflict"]

DEFAULT_ATTEMPTS = 5


class ConflictRetriesExhausted(Exception):
    """Every attempt lost its race with another writer of the same record."""

    def __init__(self, what: str, attempts: int) -> None:
        super().__init__(f"{what} changed concurrently on each of {attempts} attempts")
        self.what = what
        self.attempts = attempts


@dataclass(frozen=True)
class ClusterWrite:
    """What a change function wants written in one transaction: ``record`` (still carrying the version it was
    read at), its events, and node inserts and version-checked node updates; ``operation_kind`` names the
    operation a new operation id starts (else the store reads it from the records), ``client_token`` binds the
    request's ClientToken in the same transaction."""

    record: ClusterRecord
    events: Sequence[EventRecord] = ()
    new_nodes: Sequence[NodeRecord] = ()
    changed_nodes: Sequence[NodeRecord] = ()
    operation_kind: OperationKind | None = None
    client_token: ClientTokenRecord | None = None


@dataclass(frozen=True)
class Retried:
    """The attempt that ended the loop: the record it read and, if it wrote, the stored record."""

    current: ClusterRecord
    stored: ClusterRecord | None  # None: the change function had nothing to do

    @property
    def record(self) -> ClusterRecord:
        """The cluster as it is now: the stored record, or the one read when nothing was written."""
        return self.stored if self.stored is not None else self.current


def retry_on_conflict(
    store: ClusterRepo,
    read: Callable[[], ClusterRecord],
    change: Callable[[ClusterRecord], ClusterWrite | None],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    what: str = "cluster",
) -> Retried:
    """Reads the current record (``read`` raises if it is gone), asks ``change`` what to write (None: nothing to
    do, return at once) and writes it with the version check; on ``VersionConflict`` starts over, at most
    ``attempts`` times, then raises ``ConflictRetriesExhausted``. ``change`` may raise to refuse the change
    (its exception propagates unchanged) and must have no side effects besides computing the write, since it
    can run more than once."""
    for _ in range(attempts):
        current = read()
        write = change(current)
        if write is None:
            return Retried(current, None)
        extra: dict[str, Any] = {}
        if write.operation_kind is not None:
            extra["operation_kind"] = write.operation_kind
        if write.client_token is not None:
            extra["client_token"] = write.client_token
        try:
            stored = store.update_cluster(write.record, write.events, new_nodes=write.new_nodes,
                                          changed_nodes=write.changed_nodes, **extra)
        except VersionConflict:
            continue
        return Retried(current, stored)
    raise ConflictRetriesExhausted(what, attempts)
