"""``AuditLog``: the audit trail's table (``audit_events``) on the store's engine.

Pages are keyset pages over ``(event_time, seq)``, newest first (CloudTrail's order), so they stay stable while
new calls are recorded. Pruning deletes by time only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, and_, delete, insert, or_, select
from sqlalchemy.engine import Connection, Row

from slurmpod.domain.audit import AuditRecord
from slurmpod.store.compiled import execute, executemany
from slurmpod.store.tables import audit_events

__all__ = ["AuditFilter", "AuditLog"]

_LIKE_ESCAPE = "\\"


@dataclass(frozen=True)
class AuditFilter:
    """LookupEvents' criteria (each None: any). ``account_id``/``region`` None: every account/region (the CLI)."""

    account_id: str | None = None
    region: str | None = None
    event_id: str | None = None
    event_name: str | None = None
    event_source: str | None = None
    access_key_id: str | None = None
    username: str | None = None
    read_only: bool | None = None
    resource_name: str | None = None
    resource_type: str | None = None
    start: float | None = None  # inclusive
    end: float | None = None  # inclusive


def _like(fragment: str) -> str:
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%|{escaped}|%"


def resource_keys(resources: tuple[tuple[str, str], ...]) -> str:
    names = [n for _t, n in resources] + [f"type:{t}" for t, _n in resources]
    return "|" + "|".join(names) + "|" if names else "|"


def _from_row(row: Row[Any]) -> AuditRecord:
    m = row._mapping
    return AuditRecord(
        event_id=m["event_id"], event_time=m["event_time"], event_name=m["event_name"],
        event_source=m["event_source"], account_id=m["account_id"], region=m["region"],
        access_key_id=m["access_key_id"], username=m["username"], read_only=bool(m["read_only"]),
        resources=tuple((t, n) for t, n in json.loads(m["resources"])), error_code=m["error_code"],
        detail=m["detail"], seq=m["seq"])


_INSERT = insert(audit_events)


class AuditLog:
    """Append, page and prune the audit trail."""

    def __init__(self, engine: Engine, begin: Callable[[], AbstractContextManager[Connection]]) -> None:
        self.engine = engine
        self._begin = begin
        # the inserts go to the DBAPI cursor (``store.compiled``: SQLAlchemy's execute path, ~0.1 ms, cost more than
        # the insert itself)
        # ``engine`` is the store's engine for reads (``engine.reads``): autocommit connections on PostgreSQL
        self._autocommit = engine.get_execution_options().get("isolation_level") == "AUTOCOMMIT"

    def add(self, rec: AuditRecord) -> None:
        """Appends ``rec`` in a transaction of its own, committed (durable) when this returns."""
        params = self._params(rec)
        # PostgreSQL: one statement in autocommit, one round trip (BEGIN, INSERT, COMMIT were three) with the same
        # durability (committed when the statement returns); SQLite: a write transaction of its own
        with (self.engine.connect() if self._autocommit else self._begin()) as conn:
            execute(conn, _INSERT, params, insert=True)

    def add_many(self, recs: Sequence[AuditRecord]) -> None:
        """Appends ``recs`` in one transaction (all or none), committed when this returns."""
        if not recs:
            return
        with self._begin() as conn:  # (PostgreSQL: one INSERT from unnest(arrays), ``store.compiled.executemany``)
            executemany(conn, _INSERT, [self._params(r) for r in recs], insert=True)

    @staticmethod
    def _params(rec: AuditRecord) -> dict[str, Any]:
        return {
            "event_id": rec.event_id, "event_time": rec.event_time, "account_id": rec.account_id,
            "region": rec.region, "event_name": rec.event_name, "event_source": rec.event_source,
            "access_key_id": rec.access_key_id, "username": rec.username, "read_only": rec.read_only,
            "resources": json.dumps([list(r) for r in rec.resources]), "resource_keys": resource_keys(rec.resources),
            "error_code": rec.error_code, "detail": rec.detail,
        }

    def page(self, f: AuditFilter, *, cursor: tuple[float, int] | None = None, limit: int = 50,
             oldest_first: bool = False, after_seq: int | None = None) -> list[AuditRecord]:
        """Newest first (``oldest_first``: the other way), strictly past ``cursor`` = (event_time, seq);
        ``after_seq``: only rows inserted after that one (``slurmpod audit --follow``)."""
        c = audit_events.c
        conds: list[Any] = []
        exact = ((c.account_id, f.account_id), (c.region, f.region), (c.event_id, f.event_id),
                 (c.event_name, f.event_name), (c.event_source, f.event_source),
                 (c.access_key_id, f.access_key_id), (c.username, f.username), (c.read_only, f.read_only))
        conds += [col == value for col, value in exact if value is not None]
        if f.resource_name is not None:
            conds.append(c.resource_keys.like(_like(f.resource_name), escape=_LIKE_ESCAPE))
        if f.resource_type is not None:
            conds.append(c.resource_keys.like(_like(f"type:{f.resource_type}"), escape=_LIKE_ESCAPE))
        if f.start is not None:
            conds.append(c.event_time >= f.start)
        if f.end is not None:
            conds.append(c.event_time <= f.end)
        if after_seq is not None:
            conds.append(c.seq > after_seq)
        if cursor is not None:
            t, s = cursor
            if oldest_first:
                conds.append(or_(c.event_time > t, and_(c.event_time == t, c.seq > s)))
            else:
                conds.append(or_(c.event_time < t, and_(c.event_time == t, c.seq < s)))
        order = (c.event_time.asc(), c.seq.asc()) if oldest_first else (c.event_time.desc(), c.seq.desc())
        q = select(audit_events).where(and_(*conds)).order_by(*order).limit(limit)
        with self.engine.connect() as conn:
            return [_from_row(r) for r in conn.execute(q)]

    def iter_all(self) -> Iterator[AuditRecord]:
        with self.engine.connect() as conn:
            for r in conn.execute(select(audit_events).order_by(audit_events.c.seq)):
                yield _from_row(r)

    def prune(self, older_than: float) -> int:
        """Deletes every record before ``older_than`` (epoch seconds); returns how many."""
        with self._begin() as conn:
            res = conn.execute(delete(audit_events).where(audit_events.c.event_time < older_than))
        return int(res.rowcount or 0)
