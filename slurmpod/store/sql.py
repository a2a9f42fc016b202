"""``SqlStore``: clusters, nodes, events and settings in one SQL database (implements ``store.protocol.Store``).

Every update of a cluster or node row is guarded by its ``version`` column (``WHERE version = :expected``);
losing a race raises ``VersionConflict`` and the caller re-reads (``store.retry.retry_on_conflict``). The engine
and migrations are in ``store.engine``, the row <-> record mappers in ``store.rows``.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, insert, select, text, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from slurmpod.domain.model import ClusterRecord, ClusterSummary, EventRecord, NodeRecord
from slurmpod.domain.operations import ClientTokenRecord, OperationKind, OperationRecord
from slurmpod.domain.status import ClusterStatus, InstanceStatus
from slurmpod.errors import ResourceInUse, VersionConflict
from slurmpod.store import operations as ops
from slurmpod.store.audit import AuditLog
from slurmpod.store.compiled import RawReads, execute, executemany, in_binds, in_chunks, update_rows
from slurmpod.store.engine import make_engine, migrate, reads
from slurmpod.store.leases import Fence, LeaseStore
from slurmpod.store.rows import (
    cluster_from_row,
    cluster_values,
    dump,
    event_from_row,
    event_values,
    node_from_row,
    node_values,
)
from slurmpod.store.tables import clusters, events, nodes, settings_kv
from slurmpod.store.views import NodeView

__all__ = ["NodeView", "SqlStore", "make_engine", "migrate"]

# Statements built once (with bind parameters): building an ``update(...).values(**row)`` per call cost
# about 200 us of the 270 us of an update_node, which the reconciler runs ~7 times per node booted.
_NODE_BY_ID = select(nodes).where(nodes.c.instance_id == bindparam("k_iid"))
_MAX_NODE_SEQ = select(func.max(nodes.c.seq)).where(nodes.c.cluster_id == bindparam("k_cid"))  # per CreateNodes
_INSERT_EVENT = insert(events)
_INSERT_CLUSTER = insert(clusters)
_INSERT_NODE = insert(nodes)
_CLUSTER_IDS = select(clusters.c.cluster_id)
_SETTING = select(settings_kv.c.value).where(settings_kv.c.key == bindparam("k_key"))  # read per request (images)
_UPDATE_CLUSTER = (
    update(clusters)
    .where(and_(clusters.c.cluster_id == bindparam("k_cid"), clusters.c.version == bindparam("k_ver")))
    .values({c.name: bindparam(c.name) for c in clusters.c if c.name != "cluster_id"})
)
_CLUSTER_BY_ID = select(clusters).where(clusters.c.cluster_id == bindparam("k_cid"))
_CLUSTER_VERSION = select(clusters.c.version).where(clusters.c.cluster_id == bindparam("k_cid"))
_CLUSTER_BY_NAME = select(clusters).where(and_(clusters.c.account_id == bindparam("k_acct"),
                                              clusters.c.region == bindparam("k_region"),
                                              clusters.c.name == bindparam("k_name")))
_SUMMARIES = (select(clusters.c.cluster_id, clusters.c.name, clusters.c.arn, clusters.c.status,
                     clusters.c.creation_time)
              .where(and_(clusters.c.account_id == bindparam("k_acct"), clusters.c.region == bindparam("k_region")))
              .order_by(clusters.c.creation_time, clusters.c.cluster_id))
_UPDATE_NODE = (
    update(nodes)
    .where(and_(nodes.c.instance_id == bindparam("k_iid"), nodes.c.version == bindparam("k_ver")))
    .values({c.name: bindparam(c.name) for c in nodes.c if c.name != "instance_id"})
)


def _keyset_page(query: Any, keys: Sequence[Any], conds: list[Any], *, descending: bool, keyed: bool) -> Any:
    """``query`` restricted by ``conds`` and, when ``keyed``, to rows strictly past the key ``k_key0..`` in the
    order of ``keys``; sorted by ``keys``, at most ``k_limit`` rows (the bind parameters ``keyset_params`` fills)."""
    if keyed:
        bound = tuple_(*(bindparam(f"k_key{i}") for i in range(len(keys))))
        conds = [*conds, tuple_(*keys) < bound if descending else tuple_(*keys) > bound]
    return (query.where(and_(*conds))
            .order_by(*(k.desc() if descending else k.asc() for k in keys)).limit(bindparam("k_limit")))


def _keyset_params(params: dict[str, Any], after: Sequence[Any] | None) -> dict[str, Any]:
    for i, v in enumerate(after or ()):
        params[f"k_key{i}"] = v
    return params


def _window(column: Any, after: bool, before: bool) -> list[Any]:
    """``column`` strictly after ``k_after`` / before ``k_before`` (the time filters of both listings)."""
    return [*([column > bindparam("k_after")] if after else []), *([column < bindparam("k_before")] if before else [])]


@functools.cache
def _page_statement(by_name: bool, descending: bool, keyed: bool, launched_after: bool, launched_before: bool) -> Any:
    """``page_nodes``' query for one combination of its options, built once (bind parameters ``k_…``)."""
    c = nodes.c
    keys = (c.group_name, c.instance_id) if by_name else (c.launch_time, c.seq, c.instance_id)
    conds = [c.cluster_id == bindparam("k_cid"), c.status != bindparam("k_status"),
             *_window(c.launch_time, launched_after, launched_before)]
    return _keyset_page(select(nodes), keys, conds, descending=descending, keyed=keyed)


@functools.cache
def _summary_page_statement(by_name: bool, descending: bool, keyed: bool, created_after: bool,
                            created_before: bool, postgresql: bool) -> Any:
    """``page_cluster_summaries``' query for one combination of its options, built once (bind parameters ``k_…``).
    Names sort by code point, as in Python and on SQLite (PostgreSQL's default collation may follow a locale)."""
    c = clusters.c
    name = c.name.collate("C") if postgresql else c.name
    keys = (name, c.cluster_id) if by_name else (c.creation_time, c.cluster_id)
    conds = [c.account_id == bindparam("k_acct"), c.region == bindparam("k_region"),
             *_window(c.creation_time, created_after, created_before)]
    return _keyset_page(select(c.cluster_id, c.name, c.arn, c.status, c.creation_time), keys, conds,
                        descending=descending, keyed=keyed)


_CLUSTER_STATUS = {s.value: s for s in ClusterStatus}  # (the Enum's own lookup by value costs ~1 us a row)


def _summary(r: Sequence[Any]) -> ClusterSummary:
    return ClusterSummary(r[0], r[1], r[2], _CLUSTER_STATUS[r[3]], float(r[4]))


_NODE_TALLY = (select(nodes.c.group_name, nodes.c.status, nodes.c.image_id, func.count())
               .where(and_(nodes.c.cluster_id == bindparam("k_cid"), nodes.c.status != bindparam("k_status")))
               .group_by(nodes.c.group_name, nodes.c.status, nodes.c.image_id))
# the same by the cluster's account, region and name (DescribeCluster's reads go in one round trip: ``cluster_view``)
_NODE_TALLY_BY_NAME = (
    select(nodes.c.group_name, nodes.c.status, nodes.c.image_id, func.count())
    .where(and_(nodes.c.cluster_id == select(clusters.c.cluster_id)
                .where(and_(clusters.c.account_id == bindparam("k_acct"), clusters.c.region == bindparam("k_region"),
                            clusters.c.name == bindparam("k_name"))).scalar_subquery(),
                nodes.c.status != bindparam("k_status")))
    .group_by(nodes.c.group_name, nodes.c.status, nodes.c.image_id))
_NODES_OF_CLUSTER = select(nodes).where(nodes.c.cluster_id == bindparam("k_cid")).order_by(nodes.c.seq)
_DELETE_CLUSTER_ROWS = (  # a cluster's rows, children first
    delete(nodes).where(nodes.c.cluster_id == bindparam("k_cid")),
    delete(events).where(events.c.cluster_id == bindparam("k_cid")),
    *ops.CLUSTER_CHILD_ROWS,
    delete(clusters).where(clusters.c.cluster_id == bindparam("k_cid")),
)


# statements with an IN list of ``size`` values (``store.compiled.in_chunks``), one per size
@functools.cache
def _clusters_in(size: int) -> Any:
    return select(clusters).where(clusters.c.cluster_id.in_(in_binds(size)))


@functools.cache
def _fingerprints_in(size: int) -> Any:
    c = nodes.c
    return (select(c.cluster_id, func.count(), func.sum(c.version), func.max(c.seq), func.sum(c.seq * c.version))
            .where(c.cluster_id.in_(in_binds(size))).group_by(c.cluster_id))


@functools.cache
def _nodes_in(size: int) -> Any:
    return select(nodes).where(nodes.c.instance_id.in_(in_binds(size)))


@functools.cache
def _group_nodes(size: int) -> Any:
    c = nodes.c
    return select(nodes).where(c.cluster_id == bindparam("k_cid"), c.group_name.in_(in_binds(size))).order_by(c.seq)


@functools.cache
def _any_group_node(size: int) -> Any:
    c = nodes.c
    return select(nodes).where(c.cluster_id == bindparam("k_cid"), c.group_name.in_(in_binds(size)),
                               c.status == bindparam("k_status")).limit(1)


def _cluster_of(evs: Sequence[EventRecord]) -> str | None:
    return evs[0].cluster_id if evs else None


def _tally(cluster_id: str, rows: Sequence[tuple[Any, ...]]) -> list[NodeRecord]:
    """``node_tally``'s stand-ins from its GROUP BY rows (group, status, image id, count)."""
    out: list[NodeRecord] = []
    for group, status, image_id, count in rows:
        stand_in = NodeRecord(instance_id="", cluster_id=cluster_id, group=group, seq=0,
                              status=InstanceStatus(status), launch_time=0.0, image_id=image_id)
        out += [stand_in] * int(count)
    return out


class SqlStore:
    """The one store implementation; SQLite or PostgreSQL chosen by URL."""

    def __init__(self, url: str, *, run_migrations: bool = True) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._reads = reads(self.engine)  # one round trip per read on PostgreSQL (``engine.reads``)
        # cluster_id -> (raw row, parsed record): a row identical to the last one read is not parsed again
        self._parsed_clusters: dict[str, tuple[tuple[Any, ...], ClusterRecord]] = {}
        # SQLite allows one writer; its busy handler sleeps 1-100 ms between retries, so this process's
        # writers queue on a lock instead (8 boot workers spent more time asleep than writing)
        self._write_lock: AbstractContextManager[Any] = (
            threading.Lock() if self.engine.dialect.name == "sqlite" else nullcontext())
        if run_migrations:
            migrate(self.engine)
        self._raw = RawReads(self.engine)  # the reads a request or a boot makes, on the DBAPI cursor (store.compiled)
        self.audit = AuditLog(self._reads, self._begin)  # the audit trail (CloudTrail's event history)
        self.leases = LeaseStore(self._reads, self._begin)  # which server reconciles which cluster
        self._fence: Fence | None = None

    def fenced(self, fence: Fence) -> SqlStore:
        """This store (same engine, caches and write lock) whose cluster, node and event writes each check, in
        their transaction, that ``fence.owner`` still holds the cluster's lease (``LeaseStore.check``), else
        raise ``LeaseLost`` having written nothing: the reconciler's store when several servers share the database.
        """
        view = copy.copy(self)
        view._fence = fence
        return view

    def _check_fence(self, conn: Connection, cluster_id: str | None) -> None:
        if self._fence is not None and cluster_id is not None:
            self.leases.check(conn, self._fence, cluster_id)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        """A write transaction (behind the process-wide write lock on SQLite)."""
        with self._write_lock, self.engine.begin() as conn:
            yield conn

    def ping(self) -> bool:
        with self._reads.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True

    # ---- clusters -------------------------------------------------------------------------------

    def create_cluster(self, rec: ClusterRecord, initial_events: Sequence[EventRecord] = ()) -> None:
        """Inserts a new cluster (and its first events) atomically; ResourceInUse when the name is taken."""
        try:
            with self._begin() as conn:
                execute(conn, _INSERT_CLUSTER, cluster_values(rec), insert=True)
                self._insert_events(conn, initial_events)
                ops.record_operation(conn, None, rec, initial_events, created=True)
        except IntegrityError as exc:
            raise ResourceInUse(f"Cluster {rec.name} already exists.") from exc

    def get_cluster(self, cluster_id: str) -> ClusterRecord | None:
        row = self._raw.first(_CLUSTER_BY_ID, {"k_cid": cluster_id})
        if row is None:
            self._parsed_clusters.pop(cluster_id, None)
        return self._parsed(row)

    def cluster_version(self, cluster_id: str) -> int | None:
        row = self._raw.first(_CLUSTER_VERSION, {"k_cid": cluster_id})
        return int(row[0]) if row else None

    def get_clusters(self, cluster_ids: Sequence[str]) -> dict[str, ClusterRecord]:
        """``get_cluster`` of several in one read (a reconcile pass read 500 clusters one round trip each)."""
        rows = [r for size, params in in_chunks(cluster_ids) for r in self._raw.rows(_clusters_in(size), params)]
        out = {rec.cluster_id: rec for r in rows if (rec := self._parsed(r)) is not None}
        for cid in cluster_ids:
            if cid not in out:
                self._parsed_clusters.pop(cid, None)
        return out

    def _parsed(self, row: Any) -> ClusterRecord | None:
        if row is None:
            return None
        raw = tuple(row)
        cluster_id = raw[0]
        hit = self._parsed_clusters.get(cluster_id)
        if hit is not None and hit[0] == raw:  # exact same row: reuse the parse (JSON spec parsing dominates)
            return hit[1]
        rec = cluster_from_row(row)
        self._parsed_clusters[cluster_id] = (raw, rec)
        return rec

    def find_cluster(self, account_id: str, region: str, name: str) -> ClusterRecord | None:
        """The account's cluster called ``name`` in ``region`` (names are unique per account and region)."""
        row = self._raw.first(_CLUSTER_BY_NAME, {"k_acct": account_id, "k_region": region, "k_name": name})
        return self._parsed(row)

    def list_clusters(self, account_id: str | None = None, region: str | None = None) -> list[ClusterRecord]:
        q = select(clusters).order_by(clusters.c.creation_time, clusters.c.cluster_id)
        if account_id is not None:
            q = q.where(clusters.c.account_id == account_id)
        if region is not None:
            q = q.where(clusters.c.region == region)
        with self._reads.connect() as conn:
            return [rec for r in conn.execute(q) if (rec := self._parsed(r)) is not None]

    def list_cluster_summaries(self, account_id: str, region: str) -> list[ClusterSummary]:
        return [_summary(r) for r in self._raw.rows(_SUMMARIES, {"k_acct": account_id, "k_region": region})]

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
        """One keyset page of ``list_cluster_summaries``, sorted in SQL by ``(name, cluster_id)`` (``by_name``) or
        ``(creation_time, cluster_id)``, strictly past the key ``after``; at most ``limit`` rows. (ListClusters read
        and sorted every cluster of the account for each page: 10 pages of 100 read 10,000 rows.)"""
        q = _summary_page_statement(by_name, descending, after is not None, created_after is not None,
                                    created_before is not None, self.engine.dialect.name == "postgresql")
        params = _keyset_params({"k_acct": account_id, "k_region": region, "k_limit": limit,
                                 "k_after": created_after, "k_before": created_before}, after)
        return [_summary(r) for r in self._raw.rows(q, params)]

    def cluster_ids(self) -> list[str]:
        return [r[0] for r in self._raw.rows(_CLUSTER_IDS, {})]

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
        """Writes ``rec`` (plus node inserts and version-checked node updates) in one transaction if the
        stored version is still ``rec.version``; returns the stored record. A new ``rec.operation_id`` records
        the operation (of ``operation_kind``, else the kind the records show); ``client_token`` is bound in the
        same transaction (``ClientTokenTaken``, nothing written, when a live binding holds it)."""
        stored = replace(rec, version=rec.version + 1)
        with self._begin() as conn:
            self._check_fence(conn, rec.cluster_id)
            previous = ops.previous_cluster(conn, rec, parse=self._parsed)
            values = cluster_values(stored)
            del values["cluster_id"]
            res = execute(conn, _UPDATE_CLUSTER, {**values, "k_cid": rec.cluster_id, "k_ver": rec.version})
            if res.rowcount != 1:
                raise VersionConflict(f"cluster {rec.cluster_id} changed (expected version {rec.version})")
            executemany(conn, _INSERT_NODE, [node_values(n) for n in new_nodes], insert=True)
            for n in changed_nodes:
                self._update_node(conn, n)
            self._insert_events(conn, new_events)
            if previous is not False:
                ops.record_operation(conn, previous if isinstance(previous, ClusterRecord) else None, stored,
                                     new_events, operation_kind)
            if client_token is not None:
                ops.claim_token(conn, client_token)
        return stored

    # ---- operations and client tokens -------------------------------------------------------------

    def list_operations(self, cluster_id: str) -> list[OperationRecord]:
        with self._reads.connect() as conn:
            return ops.list_operations(conn, cluster_id)

    def get_client_token(self, account_id: str, region: str, operation: str, token: str,
                         now: float) -> ClientTokenRecord | None:
        with self._reads.connect() as conn:
            return ops.get_token(conn, account_id, region, operation, token, now)

    def delete_cluster(self, cluster_id: str) -> None:
        """Removes the cluster, its nodes and its events."""
        with self._begin() as conn:
            self._check_fence(conn, cluster_id)
            for statement in _DELETE_CLUSTER_ROWS:
                execute(conn, statement, {"k_cid": cluster_id})

    # ---- nodes ----------------------------------------------------------------------------------

    def add_nodes(self, recs: Sequence[NodeRecord], new_events: Sequence[EventRecord] = ()) -> None:
        with self._begin() as conn:
            self._check_fence(conn, recs[0].cluster_id if recs else _cluster_of(new_events))
            # one executemany, not one INSERT per node (3,000 nodes: 1.2 s -> 0.1 s)
            executemany(conn, _INSERT_NODE, [node_values(n) for n in recs], insert=True)
            self._insert_events(conn, new_events)

    def list_nodes(self, cluster_id: str, groups: Iterable[str] | None = None) -> list[NodeRecord]:
        """The cluster's nodes by ``seq``; only those of ``groups`` when given."""
        if groups is None:
            return [node_from_row(r) for r in self._raw.rows(_NODES_OF_CLUSTER, {"k_cid": cluster_id})]
        chunks = list(in_chunks(sorted(set(groups))))
        found = [node_from_row(r) for size, params in chunks
                 for r in self._raw.rows(_group_nodes(size), {**params, "k_cid": cluster_id})]
        return found if len(chunks) <= 1 else sorted(found, key=lambda n: n.seq)

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
        """One keyset page of a cluster's nodes, sorted in SQL by ``(group, instance_id)`` (``by_name``) or
        ``(launch_time, seq, instance_id)``, strictly past the key ``after``; at most ``limit`` rows.
        (ListClusterNodes read and sorted all 10,000 nodes for every page of 100: 12 s for a full listing.)"""
        q = _page_statement(by_name, descending, after is not None, launched_after is not None,
                            launched_before is not None)
        params = _keyset_params({"k_cid": cluster_id, "k_status": exclude_status, "k_limit": limit,
                                 "k_after": launched_after, "k_before": launched_before}, after)
        return [node_from_row(r) for r in self._raw.rows(q, params)]

    def node_tally(self, cluster_id: str, exclude_status: str = InstanceStatus.NOT_FOUND.value) -> list[NodeRecord]:
        """One stand-in per node with only ``group``, ``status`` and ``image_id`` real (the same object
        repeated per distinct triple; ``instance_id`` is empty): enough for counts and group status views,
        from one GROUP BY instead of 10,000 parsed rows per DescribeCluster."""
        return _tally(cluster_id, self._raw.rows(_NODE_TALLY, {"k_cid": cluster_id, "k_status": exclude_status}))

    def cluster_view(self, *, cluster_id: str | None = None, account_id: str = "", region: str = "", name: str = "",
                     setting: str | None = None) -> tuple[ClusterRecord | None, list[NodeRecord], Any]:
        """``get_cluster(cluster_id)`` (or ``find_cluster(account_id, region, name)``), its ``node_tally`` and, with
        ``setting``, ``get_setting(setting)``: DescribeCluster's reads, in one round trip on PostgreSQL."""
        status = InstanceStatus.NOT_FOUND.value
        reads: list[tuple[Any, Mapping[str, Any]]] = (
            [(_CLUSTER_BY_ID, {"k_cid": cluster_id}), (_NODE_TALLY, {"k_cid": cluster_id, "k_status": status})]
            if cluster_id is not None else
            [(_CLUSTER_BY_NAME, {"k_acct": account_id, "k_region": region, "k_name": name}),
             (_NODE_TALLY_BY_NAME, {"k_acct": account_id, "k_region": region, "k_name": name, "k_status": status})])
        if setting is not None:
            reads.append((_SETTING, {"k_key": setting}))
        results = self._raw.batch(reads)
        row = results[0][0] if results[0] else None
        if row is None and cluster_id is not None:
            self._parsed_clusters.pop(cluster_id, None)
        rec = self._parsed(row)
        value = json.loads(results[2][0][0]) if setting is not None and results[2] else None
        return rec, _tally(rec.cluster_id, results[1]) if rec is not None else [], value

    def any_node(self, cluster_id: str, groups: Iterable[str], status: InstanceStatus) -> NodeRecord | None:
        """Some node of ``groups`` in ``status`` (no ordering, so the scan stops at the first match: the
        "is a controller Running?" question asked once per booting node stays cheap at 10,000 nodes)."""
        for size, params in in_chunks(sorted(set(groups))):
            row = self._raw.first(_any_group_node(size), {**params, "k_cid": cluster_id, "k_status": status.value})
            if row is not None:
                return node_from_row(row)
        return None

    def node_view(self, cluster_id: str) -> NodeView:
        """``list_nodes(cluster_id)`` read only if and when the caller looks at it."""
        return NodeView(lambda: self.list_nodes(cluster_id))

    def nodes_fingerprint(self, cluster_id: str) -> tuple[int, int, int, int]:
        """A cheap summary that changes whenever a node of the cluster is added, removed or updated (every
        update bumps ``version``): count, sum of versions, max seq, sum of seq*version. One aggregate query,
        no rows sent to Python; lets an idle reconcile pass skip an unchanged cluster."""
        return self.nodes_fingerprints([cluster_id]).get(cluster_id, (0, 0, 0, 0))

    def nodes_fingerprints(self, cluster_ids: Sequence[str]) -> dict[str, tuple[int, int, int, int]]:
        """``nodes_fingerprint`` of several clusters in one GROUP BY (a cluster without nodes: absent)."""
        return {r[0]: (int(r[1]), int(r[2]), int(r[3]), int(r[4]))
                for size, params in in_chunks(cluster_ids) for r in self._raw.rows(_fingerprints_in(size), params)}

    def get_node(self, instance_id: str) -> NodeRecord | None:
        row = self._raw.first(_NODE_BY_ID, {"k_iid": instance_id})
        return node_from_row(row) if row else None

    def max_node_seq(self, cluster_id: str) -> int:
        row = self._raw.first(_MAX_NODE_SEQ, {"k_cid": cluster_id})
        return int(row[0] or 0) if row else 0

    def update_node(self, rec: NodeRecord, new_events: Sequence[EventRecord] = ()) -> NodeRecord:
        with self._begin() as conn:
            self._check_fence(conn, rec.cluster_id)
            stored = self._update_node(conn, rec)
            self._insert_events(conn, new_events)
        return stored

    def get_nodes(self, instance_ids: Sequence[str]) -> dict[str, NodeRecord]:
        """The stored nodes among ``instance_ids``, by id, in one query."""
        rows = [r for size, params in in_chunks(instance_ids) for r in self._raw.rows(_nodes_in(size), params)]
        return {r.instance_id: r for r in map(node_from_row, rows)}

    def update_nodes(self, changes: Sequence[tuple[NodeRecord, Sequence[EventRecord]]]
                     ) -> list[NodeRecord | None]:
        """Version-checked writes of several nodes (each with its events) in one transaction. A node whose stored
        version moved is skipped, its events too (None in its place); the others are written."""
        out: list[NodeRecord | None] = []
        if not changes:
            return out
        with self._begin() as conn:
            for cluster_id in {rec.cluster_id for rec, _ in changes}:
                self._check_fence(conn, cluster_id)
            evs: list[EventRecord] = []
            if len(changes) > 1 and conn.dialect.name == "postgresql":  # one statement, not one per node
                stored = [replace(rec, version=rec.version + 1) for rec, _ in changes]
                rows = [{**node_values(st), "k_key": rec.instance_id, "k_version": rec.version}
                        for st, (rec, _) in zip(stored, changes, strict=True)]
                for row in rows:
                    del row["instance_id"]
                written = update_rows(conn, nodes, "instance_id", "version", rows)
                for st, (rec, new_events) in zip(stored, changes, strict=True):
                    ok = rec.instance_id in written
                    out.append(st if ok else None)
                    evs += new_events if ok else ()
                self._insert_events(conn, evs)
                return out
            for rec, new_events in changes:
                try:
                    out.append(self._update_node(conn, rec))
                except VersionConflict:
                    out.append(None)
                    continue
                evs += new_events
            self._insert_events(conn, evs)
        return out

    def delete_nodes(self, instance_ids: Sequence[str], new_events: Sequence[EventRecord] = ()) -> None:
        """``delete_node`` of several nodes of one cluster in one transaction."""
        if not instance_ids:
            return
        with self._begin() as conn:
            if self._fence is not None:
                owners = conn.execute(select(nodes.c.cluster_id).where(nodes.c.instance_id.in_(list(instance_ids))))
                for cluster_id in {r[0] for r in owners} or {_cluster_of(new_events)}:
                    self._check_fence(conn, cluster_id)
            conn.execute(delete(nodes).where(nodes.c.instance_id.in_(list(instance_ids))))
            self._insert_events(conn, new_events)

    def _update_node(self, conn: Connection, rec: NodeRecord) -> NodeRecord:
        stored = replace(rec, version=rec.version + 1)
        values = node_values(stored)
        del values["instance_id"]
        res = execute(conn, _UPDATE_NODE, {**values, "k_iid": rec.instance_id, "k_ver": rec.version})
        if res.rowcount != 1:
            raise VersionConflict(f"node {rec.instance_id} changed (expected version {rec.version})")
        return stored

    def delete_node(self, instance_id: str, new_events: Sequence[EventRecord] = ()) -> None:
        with self._begin() as conn:
            if self._fence is not None:
                cluster_id = conn.execute(select(nodes.c.cluster_id).where(nodes.c.instance_id == instance_id)).scalar()
                self._check_fence(conn, cluster_id or _cluster_of(new_events))
            conn.execute(delete(nodes).where(nodes.c.instance_id == instance_id))
            self._insert_events(conn, new_events)

    # ---- events ---------------------------------------------------------------------------------

    def _insert_events(self, conn: Connection, evs: Sequence[EventRecord]) -> None:
        # one prebuilt statement (executemany for several): building insert().values() per event cost more
        executemany(conn, _INSERT_EVENT, [event_values(ev) for ev in evs], insert=True)

    def add_events(self, evs: Sequence[EventRecord]) -> None:
        with self._begin() as conn:
            for cluster_id in {e.cluster_id for e in evs}:
                self._check_fence(conn, cluster_id)
            self._insert_events(conn, evs)

    def list_events(self, cluster_id: str) -> list[EventRecord]:
        with self._reads.connect() as conn:
            rows = conn.execute(select(events).where(events.c.cluster_id == cluster_id).order_by(events.c.seq))
            return [event_from_row(r) for r in rows]

    def get_event(self, cluster_id: str, event_id: str) -> EventRecord | None:
        with self._reads.connect() as conn:
            row = conn.execute(
                select(events).where(and_(events.c.cluster_id == cluster_id, events.c.event_id == event_id))
            ).first()
        return event_from_row(row) if row else None

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
        """One keyset page of a cluster's events ordered by ``(event_time, seq)``.

        ``after``/``before`` are exclusive time bounds; ``cursor`` is the ``(event_time, seq)`` of the last
        event of the previous page (rows strictly past it are returned), so pages stay stable while new
        events are inserted.
        """
        from sqlalchemy import or_

        c = events.c
        conds = [c.cluster_id == cluster_id]
        if group is not None:
            conds.append(c.group_name == group)
        if instance_id is not None:
            conds.append(c.instance_id == instance_id)
        if resource_type is not None:
            conds.append(c.resource_type == resource_type)
        if operation_id is not None:
            conds.append(c.operation_id == operation_id)
        if after is not None:
            conds.append(c.event_time > after)
        if before is not None:
            conds.append(c.event_time < before)
        if cursor is not None:
            t, s = cursor
            if descending:
                conds.append(or_(c.event_time < t, and_(c.event_time == t, c.seq < s)))
            else:
                conds.append(or_(c.event_time > t, and_(c.event_time == t, c.seq > s)))
        order = (c.event_time.desc(), c.seq.desc()) if descending else (c.event_time.asc(), c.seq.asc())
        q = select(events).where(and_(*conds)).order_by(*order)
        if limit is not None:
            q = q.limit(limit)
        with self._reads.connect() as conn:
            return [event_from_row(r) for r in conn.execute(q)]

    # ---- settings -------------------------------------------------------------------------------

    def get_setting(self, key: str) -> Any:
        row = self._raw.first(_SETTING, {"k_key": key})
        return json.loads(row[0]) if row else None

    def put_setting(self, key: str, value: Any) -> None:
        """Upsert (safe under concurrent writers on both SQLite and PostgreSQL)."""
        from sqlalchemy.dialects import postgresql, sqlite

        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(settings_kv).values(key=key, value=dump(value))
        upsert = stmt.on_conflict_do_update(index_elements=[settings_kv.c.key], set_={"value": stmt.excluded.value})
        with self._begin() as conn:
            conn.execute(upsert)

    def integrity_check(self) -> list[str]:
        """Database-level and referential checks; an empty list means healthy."""
        problems: list[str] = []
        with self._reads.connect() as conn:
            if self.engine.dialect.name == "sqlite":
                res = conn.execute(text("PRAGMA integrity_check")).scalar()
                if res != "ok":
                    problems.append(f"sqlite integrity_check: {res}")
            orphans = conn.execute(
                select(func.count())
                .select_from(nodes)
                .where(~nodes.c.cluster_id.in_(select(clusters.c.cluster_id)))
            ).scalar()
            if orphans:
                problems.append(f"{orphans} node rows without a cluster")
        return problems
