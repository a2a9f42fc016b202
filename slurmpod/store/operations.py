"""Cluster operations and ClientTokens on the store's connection (``cluster_operations``, ``client_tokens``).

``record_operation`` runs inside the transaction of a cluster write: when the write gives the cluster a new
operation id, the operation is recorded (``domain.operations.operation_started``) and the previous one, if it was
still running, is marked superseded. ``claim_token`` inserts a ClientToken in the same transaction as the write it
belongs to, so a token is never bound without its change, nor a change made twice for one token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from slurmpod.domain.model import ClusterRecord, EventRecord
from slurmpod.domain.operations import (
    CLIENT_TOKEN_TTL,
    ClientTokenRecord,
    OperationKind,
    OperationRecord,
    cluster_busy,
    operation_started,
)
from slurmpod.domain.status import InstanceStatus
from slurmpod.errors import ClientTokenTaken
from slurmpod.store.compiled import execute
from slurmpod.store.rows import cluster_from_row
from slurmpod.store.tables import client_tokens, cluster_operations, clusters, nodes

__all__ = ["claim_token", "get_token", "list_operations", "record_operation"]

_GONE = (InstanceStatus.SHUTTING_DOWN.value, InstanceStatus.NOT_FOUND.value)


_ACTIVE_COUNTS = (select(nodes.c.group_name, func.count())
                  .where(and_(nodes.c.cluster_id == bindparam("k_cid"), *(nodes.c.status != s for s in _GONE)))
                  .group_by(nodes.c.group_name))


def _active_counts(conn: Connection, cluster_id: str) -> dict[str, int]:
    return {str(g): int(n) for g, n in execute(conn, _ACTIVE_COUNTS, {"k_cid": cluster_id}).rows}


# prebuilt statements (bind parameters): these run in every cluster write's transaction
_OPERATION_ID = select(clusters.c.operation_id).where(clusters.c.cluster_id == bindparam("k_cid"))
_CLUSTER = select(clusters).where(clusters.c.cluster_id == bindparam("k_cid"))
_OP_EXISTS = select(cluster_operations.c.operation_id).where(and_(
    cluster_operations.c.cluster_id == bindparam("k_cid"), cluster_operations.c.operation_id == bindparam("k_op")))
_INSERT_OP = insert(cluster_operations)
_SUPERSEDE = (update(cluster_operations).where(and_(cluster_operations.c.cluster_id == bindparam("k_cid"),
                                                    cluster_operations.c.operation_id == bindparam("k_op")))
              .values(superseded=True))


def previous_cluster(conn: Connection, new: ClusterRecord,
                     parse: Callable[[Any], ClusterRecord | None] = cluster_from_row) -> ClusterRecord | None | bool:
    """Before an update: the stored record when ``new`` carries another operation id, else False (no new
    operation: nothing to read or record). Only the operation id is read in the common case. ``parse``: the
    store's row parser (its cache knows the row the caller has just read)."""
    if not new.operation_id:
        return False
    cur = execute(conn, _OPERATION_ID, {"k_cid": new.cluster_id}).first()
    if cur is None or cur[0] == new.operation_id:
        return False
    row = execute(conn, _CLUSTER, {"k_cid": new.cluster_id}).first()
    return (parse(row) or False) if row is not None else False


def record_operation(conn: Connection, old: ClusterRecord | None, new: ClusterRecord,
                     new_events: Sequence[EventRecord], kind: OperationKind | None = None, *,
                     created: bool = False) -> None:
    """Records the operation ``new`` starts (if any); ``kind`` overrides the kind read from the records.
    ``created``: ``new`` was inserted in this transaction (it has no nodes and no operation yet)."""
    now = min((e.event_time for e in new_events), default=time.time())
    op = operation_started(old, new, now, {} if created else _active_counts(conn, new.cluster_id), kind)
    if op is None:
        return
    if not created and execute(conn, _OP_EXISTS, {"k_cid": op.cluster_id, "k_op": op.operation_id}).first():
        return  # already recorded (an operation id a record returned to)
    if old is not None and old.operation_id and cluster_busy(old):
        execute(conn, _SUPERSEDE, {"k_cid": old.cluster_id, "k_op": old.operation_id})
    execute(conn, _INSERT_OP, {
        "operation_id": op.operation_id, "cluster_id": op.cluster_id, "kind": op.kind.value,
        "creation_time": op.creation_time, "superseded": False,
        "details": json.dumps(op.details_dict(), sort_keys=True)}, insert=True)


def _operation_from_row(r: Row[Any]) -> OperationRecord:
    m = r._mapping
    return OperationRecord(
        operation_id=m["operation_id"], cluster_id=m["cluster_id"], kind=OperationKind(m["kind"]),
        creation_time=float(m["creation_time"]),
        scaling=OperationRecord.scaling_from_dict(json.loads(m["details"] or "{}")),
        superseded=bool(m["superseded"]))


def list_operations(conn: Connection, cluster_id: str) -> list[OperationRecord]:
    """The cluster's operations, oldest first."""
    c = cluster_operations.c
    q = select(cluster_operations).where(c.cluster_id == cluster_id).order_by(c.creation_time, c.operation_id)
    return [_operation_from_row(r) for r in conn.execute(q)]


#: a deleted cluster's rows of these tables (bind parameter ``k_cid``), deleted with it
CLUSTER_CHILD_ROWS = (delete(cluster_operations).where(cluster_operations.c.cluster_id == bindparam("k_cid")),)


def _token_key(account_id: str, region: str, operation: str, token: str) -> Any:
    c = client_tokens.c
    return and_(c.account_id == account_id, c.region == region, c.operation == operation, c.token == token)


def get_token(conn: Connection, account_id: str, region: str, operation: str, token: str,
              now: float) -> ClientTokenRecord | None:
    row = conn.execute(select(client_tokens).where(_token_key(account_id, region, operation, token))).first()
    if row is None:
        return None
    m = row._mapping
    rec = ClientTokenRecord(m["account_id"], m["region"], m["operation"], m["token"], m["fingerprint"],
                            m["cluster_id"], json.loads(m["result"]), float(m["created"]))
    return rec if rec.live(now) else None


def claim_token(conn: Connection, rec: ClientTokenRecord) -> None:
    """Binds the token (replacing an expired binding); ``ClientTokenTaken`` when a live one holds it."""
    c = client_tokens.c
    conn.execute(delete(client_tokens).where(and_(
        _token_key(rec.account_id, rec.region, rec.operation, rec.token), c.created <= rec.created - CLIENT_TOKEN_TTL)))
    try:  # the caller's transaction rolls back as this propagates: nothing of the write stays
        conn.execute(insert(client_tokens).values(
            account_id=rec.account_id, region=rec.region, operation=rec.operation, token=rec.token,
            fingerprint=rec.fingerprint, cluster_id=rec.cluster_id,
            result=json.dumps(rec.result, sort_keys=True), created=rec.created))
    except IntegrityError as exc:
        raise ClientTokenTaken(rec.token) from exc
    # tokens expire: drop the stale ones of this account now and then (cheap, indexed by the key's prefix)
    conn.execute(delete(client_tokens).where(and_(c.account_id == rec.account_id,
                                                  c.created <= rec.created - CLIENT_TOKEN_TTL)))
