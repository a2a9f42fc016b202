"""Schema 0007 (cluster_operations, client_tokens): a 0006 database migrates; operations are recorded with the
cluster writes that start them (superseded when a newer one starts meanwhile); a ClientToken is bound in the same
transaction as its write, and a second binding rolls the whole write back. SQLite and, when available, PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest
import sqlalchemy as sa

from slurmpod.domain.operations import ClientTokenRecord, OperationKind
from slurmpod.domain.status import ClusterStatus
from slurmpod.errors import ClientTokenTaken
from slurmpod.store import sql as sqlmod
from slurmpod.store.sql import SqlStore
from tests.store.test_migration_regions_audit import _upgrade
from tests.store.test_store import ACCOUNT, REGION, make_cluster, make_event


def test_0006_database_migrates(store_url: str) -> None:
    old = sqlmod.make_engine(store_url)
    try:
        _upgrade(old, "0006")
        assert "cluster_operations" not in sa.inspect(old).get_table_names()
    finally:
        old.dispose()
    store = SqlStore(store_url)
    try:
        assert {"cluster_operations", "client_tokens"} <= set(sa.inspect(store.engine).get_table_names())
    finally:
        store.close()


def test_operations_follow_cluster_writes_and_tokens_are_atomic(store_url: str) -> None:
    store = SqlStore(store_url)
    try:
        rec = make_cluster()
        store.create_cluster(rec, [make_event(rec)])
        cur = store.get_cluster(rec.cluster_id)
        assert cur is not None
        (created,) = store.list_operations(rec.cluster_id)
        assert created.operation_id == rec.operation_id and created.kind == OperationKind.CREATION
        assert created.scaling and all(c.original is None for c in created.scaling)
        # a new operation while the creation is still running supersedes it
        op2 = "0b9e2f8e-0000-4000-8000-000000000002"
        cur = store.update_cluster(replace(cur, status=ClusterStatus.DELETING, operation_id=op2))
        ops = {o.operation_id: o for o in store.list_operations(rec.cluster_id)}
        assert ops[rec.operation_id].superseded and ops[op2].kind == OperationKind.DELETION
        assert not ops[op2].scaling
        # a write without a new operation id records nothing
        cur = store.update_cluster(replace(cur, failure_message="x"))
        assert len(store.list_operations(rec.cluster_id)) == 2
        token = ClientTokenRecord(ACCOUNT, REGION, "BatchAddClusterNodes", "t1", "f", rec.cluster_id,
                                  {"added": []}, 1000.0)
        cur = store.update_cluster(replace(cur, operation_id="0b9e2f8e-0000-4000-8000-000000000003"),
                                   client_token=token)
        held = store.get_client_token(ACCOUNT, REGION, "BatchAddClusterNodes", "t1", 1001.0)
        assert held is not None and held.result == {"added": []}
        assert store.get_client_token(ACCOUNT, REGION, "BatchAddClusterNodes", "t1", 1000.0 + 9 * 3600) is None
        with pytest.raises(ClientTokenTaken):
            store.update_cluster(replace(cur, failure_message="second", operation_id=None), client_token=token)
        after = store.get_cluster(rec.cluster_id)
        assert after is not None and after.version == cur.version and after.failure_message == "x"
        store.delete_cluster(rec.cluster_id)
        assert store.list_operations(rec.cluster_id) == []
    finally:
        store.close()
