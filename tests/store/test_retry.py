"""store.retry.retry_on_conflict: read, decide, write version-checked, retry a bounded number of times."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest

from slurmpod.domain.model import ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec
from slurmpod.domain.status import ClusterStatus
from slurmpod.errors import VersionConflict
from slurmpod.store.retry import ClusterWrite, ConflictRetriesExhausted, retry_on_conflict


def _rec(version: int = 0) -> ClusterRecord:
    return ClusterRecord(cluster_id="c1", account_id="123456789012", region="us-east-1", name="c", arn="arn",
                         spec=ClusterSpec(name="c", instance_groups=()), status=ClusterStatus.IN_SERVICE,
                         creation_time=0.0, version=version)


class FakeStore:
    """Loses the first ``conflicts`` races, then stores."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts = conflicts
        self.writes: list[ClusterRecord] = []

    def update_cluster(self, rec: ClusterRecord, new_events: Sequence[EventRecord] = (), *,
                       new_nodes: Iterable[NodeRecord] = (), changed_nodes: Iterable[NodeRecord] = ()) -> ClusterRecord:
        if self.conflicts:
            self.conflicts -= 1
            raise VersionConflict("lost")
        self.writes.append(rec)
        return replace(rec, version=rec.version + 1)


def test_retries_until_the_write_wins() -> None:
    store, reads = FakeStore(conflicts=2), []

    def read() -> ClusterRecord:
        reads.append(1)
        return _rec(len(reads))

    done = retry_on_conflict(store, read, lambda cur: ClusterWrite(replace(cur, name="d")))  # type: ignore[arg-type]
    assert len(reads) == 3 and done.stored is not None and done.stored.version == 4
    assert done.record is done.stored and done.current.version == 3 and store.writes[0].name == "d"


def test_nothing_to_do_returns_the_current_record_without_writing() -> None:
    store = FakeStore(conflicts=0)
    done = retry_on_conflict(store, _rec, lambda cur: None)  # type: ignore[arg-type]
    assert done.stored is None and done.record == _rec() and not store.writes


def test_gives_up_after_the_bounded_attempts() -> None:
    store = FakeStore(conflicts=10)
    with pytest.raises(ConflictRetriesExhausted, match="3 attempts"):
        retry_on_conflict(store, _rec, lambda cur: ClusterWrite(cur), attempts=3)  # type: ignore[arg-type]
    assert store.conflicts == 7


def test_a_refusal_from_the_change_propagates() -> None:
    def refuse(cur: ClusterRecord) -> ClusterWrite:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        retry_on_conflict(FakeStore(0), _rec, refuse)  # type: ignore[arg-type]
