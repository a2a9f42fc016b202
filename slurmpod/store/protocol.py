"""What callers may rely on from a store: four repositories and the ``Store`` that combines them.

``SqlStore`` (``store.sql``) is the one implementation; callers should type against these Protocols so the
service, the reconciler and the CLI do not depend on SQLAlchemy. The guarantees every implementation keeps:

* **Version-checked writes.** Every cluster and node record carries ``version``. ``update_cluster`` and
  ``update_node`` write only if the stored version still equals ``rec.version`` and store
  ``version + 1``; otherwise they write nothing and raise ``slurmpod.errors.VersionConflict``. The caller
  re-reads and decides again (``store.retry.retry_on_conflict``); it never patches a stale record.
* **One transaction per call.** A write and the events (and, for ``update_cluster``, the node inserts and
  version-checked node updates) passed with it commit together or not at all: an event is never recorded
  for a change that did not happen, and a change never lands without its events.
* **Reads are snapshots.** Records are frozen dataclasses; a returned record never changes under the caller.
* **Ordering.** Nodes list by ``seq``; events by insertion (``seq``), or ``(event_time, seq)`` for pages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from slurmpod.domain.model import ClusterRecord, ClusterSummary, EventRecord, NodeRecord
from slurmpod.domain.operations import ClientTokenRecord, OperationKind, OperationRecord
from slurmpod.domain.status import InstanceStatus

__all__ = ["ClusterRepo", "EventRepo", "NodeRepo", "SettingsRepo", "Store"]


class ClusterRepo(Protocol):
    def create_cluster(self, rec: ClusterRecord, initial_events: Sequence[EventRecord] = ()) -> None:
        """Inserts a new cluster with its first events; ``ResourceInUse`` when the account has that name in the
        cluster's region."""
        ...

    def get_cluster(self, cluster_id: str) -> ClusterRecord | None: ...

    def get_clusters(self, cluster_ids: Sequence[str]) -> dict[str, ClusterRecord]:
        """``get_cluster`` of several in one read: those that exist, by id."""
        ...

    def find_cluster(self, account_id: str, region: str, name: str) -> ClusterRecord | None:
        """Names are unique per account and region."""
        ...

    def list_clusters(self, account_id: str | None = None, region: str | None = None) -> list[ClusterRecord]:
        """By creation time; every account's (region's) when ``account_id`` (``region``) is None."""
        ...

    def list_cluster_summaries(self, account_id: str, region: str) -> list[ClusterSummary]:
        """The account's clusters in ``region`` as ListClusters shows them, by creation time."""
        ...

    def page_cluster_summaries(
        self,
        account_id: str,
        region: str,
        *,
        by_name: bool,
        descending: bool,
        after: Sequence[Any] | None,
        limit: int,
        created_after: float | None = None,
        created_before: float | None = None,
    ) -> list[ClusterSummary]:
        """One keyset page of ``list_cluster_summaries``, strictly past the sort key ``after``."""
        ...

    def cluster_ids(self) -> list[str]: ...

    def update_cluster(
        self,
        rec: ClusterRecord,
        new_events: Sequence[EventRecord] = (),
        *,
        new_nodes: Iterable[NodeRecord] = (),
        changed_nodes: Iterable[NodeRecord] = (),
        operation_kind: OperationKind | None = None,
        client_token: ClientTokenRecord | None = None,
    ) -> ClusterRecord:
        """Writes ``rec``, node inserts, version-checked node updates and events in one transaction if the
        stored version is still ``rec.version`` (else ``VersionConflict``, nothing written); returns the
        stored record (``version + 1``). A new ``rec.operation_id`` records that operation in the same
        transaction (kind ``operation_kind`` when given); ``client_token`` is bound in it too
        (``ClientTokenTaken``, nothing written, when a live binding of the token exists)."""
        ...

    def list_operations(self, cluster_id: str) -> list[OperationRecord]:
        """The cluster's operations, oldest first."""
        ...

    def get_client_token(self, account_id: str, region: str, operation: str, token: str,
                         now: float) -> ClientTokenRecord | None:
        """The live binding of a ClientToken, or None."""
        ...

    def delete_cluster(self, cluster_id: str) -> None:
        """Removes the cluster, its nodes and its events."""
        ...


class NodeRepo(Protocol):
    def add_nodes(self, recs: Sequence[NodeRecord], new_events: Sequence[EventRecord] = ()) -> None: ...

    def list_nodes(self, cluster_id: str, groups: Iterable[str] | None = None) -> list[NodeRecord]: ...

    def page_nodes(
        self,
        cluster_id: str,
        *,
        by_name: bool,
        descending: bool,
        after: Sequence[Any] | None,
        limit: int,
        launched_after: float | None = None,
        launched_before: float | None = None,
        exclude_status: str = InstanceStatus.NOT_FOUND.value,
    ) -> list[NodeRecord]:
        """One keyset page, strictly past the sort key ``after``."""
        ...

    def node_tally(self, cluster_id: str, exclude_status: str = InstanceStatus.NOT_FOUND.value) -> list[NodeRecord]:
        """Stand-ins with only ``group``, ``status`` and ``image_id`` real (for counts)."""
        ...

    def cluster_view(self, *, cluster_id: str | None = None, account_id: str = "", region: str = "", name: str = "",
                     setting: str | None = None) -> tuple[ClusterRecord | None, list[NodeRecord], Any]:
        """The cluster (by id, or by account, region and name), its ``node_tally`` and, with ``setting``, that
        setting's value: in one round trip where the database allows."""
        ...

    def any_node(self, cluster_id: str, groups: Iterable[str], status: InstanceStatus) -> NodeRecord | None: ...

    def node_view(self, cluster_id: str) -> Sequence[NodeRecord]:
        """``list_nodes(cluster_id)``, read only if and when the caller looks at it."""
        ...

    def nodes_fingerprint(self, cluster_id: str) -> tuple[int, int, int, int]:
        """Changes whenever a node of the cluster is added, removed or updated."""
        ...

    def nodes_fingerprints(self, cluster_ids: Sequence[str]) -> dict[str, tuple[int, int, int, int]]:
        """``nodes_fingerprint`` of several clusters in one read (a cluster without nodes: absent)."""
        ...

    def cluster_version(self, cluster_id: str) -> int | None:
        """The stored record's ``version`` (None: no such cluster): one small read, to tell whether a record read
        earlier is still current."""
        ...

    def get_node(self, instance_id: str) -> NodeRecord | None: ...

    def max_node_seq(self, cluster_id: str) -> int: ...

    def update_node(self, rec: NodeRecord, new_events: Sequence[EventRecord] = ()) -> NodeRecord:
        """Version-checked like ``update_cluster``: ``VersionConflict`` when the node changed since it was read."""
        ...

    def delete_node(self, instance_id: str, new_events: Sequence[EventRecord] = ()) -> None: ...

    def get_nodes(self, instance_ids: Sequence[str]) -> dict[str, NodeRecord]:
        """The stored nodes among ``instance_ids``, by id (one round trip)."""
        ...

    def update_nodes(self, changes: Sequence[tuple[NodeRecord, Sequence[EventRecord]]]
                     ) -> list[NodeRecord | None]:
        """Several version-checked node writes with their events in one transaction; a node that changed since it
        was read is skipped with its events (None in its place)."""
        ...

    def delete_nodes(self, instance_ids: Sequence[str], new_events: Sequence[EventRecord] = ()) -> None:
        """``delete_node`` of several nodes in one transaction."""
        ...


class EventRepo(Protocol):
    def add_events(self, evs: Sequence[EventRecord]) -> None: ...

    def list_events(self, cluster_id: str) -> list[EventRecord]: ...

    def get_event(self, cluster_id: str, event_id: str) -> EventRecord | None: ...

    def list_events_filtered(
        self,
        cluster_id: str,
        *,
        group: str | None = None,
        instance_id: str | None = None,
        resource_type: str | None = None,
        operation_id: str | None = None,
        after: float | None = None,
        before: float | None = None,
        descending: bool = True,
        cursor: tuple[float, int] | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]:
        """One keyset page ordered by ``(event_time, seq)``, stable while new events arrive."""
        ...


class SettingsRepo(Protocol):
    def get_setting(self, key: str) -> Any:
        """The JSON value stored under ``key``, or None."""
        ...

    def put_setting(self, key: str, value: Any) -> None:
        """Upsert; safe under concurrent writers."""
        ...


class Store(ClusterRepo, NodeRepo, EventRepo, SettingsRepo, Protocol):
    """Everything above, plus the lifecycle of the connection."""

    def close(self) -> None: ...

    def ping(self) -> bool: ...

    def integrity_check(self) -> list[str]:
        """Database-level and referential problems; empty when healthy."""
        ...
