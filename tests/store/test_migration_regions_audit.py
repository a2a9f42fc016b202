"""Migrating a database of the previous schema (revision 0004): existing clusters keep their region (the
server's --region when they were created), names become unique per account and region (0005), and the audit
trail's table appears (0006). On SQLite and, when available, PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from slurmpod.errors import ResourceInUse
from slurmpod.store import sql as sqlmod
from slurmpod.store.rows import cluster_values
from slurmpod.store.sql import SqlStore
from tests.store.test_store import ACCOUNT, TABLES, make_cluster, make_event

ALEMBIC_INI = Path(sqlmod.__file__).with_name("alembic.ini")


def _upgrade(engine: sa.Engine, revision: str) -> None:
    cfg = Config(str(ALEMBIC_INI))
    cfg.set_main_option("script_location", str(ALEMBIC_INI.parent / "migrations"))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def test_previous_schema_migrates_and_keeps_clusters(store_url: str) -> None:
    old = sqlmod.make_engine(store_url)
    try:
        _upgrade(old, "0004")
        assert "audit_events" not in sa.inspect(old).get_table_names()
        # a cluster written by the previous release (its server ran with the default --region us-east-1)
        rec = make_cluster()
        values = dict(cluster_values(rec))
        values["region"] = "us-east-1"
        with old.begin() as conn:
            conn.execute(sa.insert(sa.Table("clusters", sa.MetaData(), autoload_with=conn)).values(**values))
    finally:
        old.dispose()

    store = SqlStore(store_url)  # migrates to head
    try:
        assert TABLES | {"audit_events"} <= set(sa.inspect(store.engine).get_table_names())
        got = store.find_cluster(ACCOUNT, "us-east-1", rec.name)
        assert got is not None and got.cluster_id == rec.cluster_id and got.region == "us-east-1"
        assert store.find_cluster(ACCOUNT, "ap-northeast-1", rec.name) is None
        # the same name in another region is now another cluster; in the same region it is still taken
        tokyo = replace(make_cluster("abcdefghij09", rec.name), region="ap-northeast-1")
        store.create_cluster(tokyo, [make_event(tokyo)])
        with pytest.raises(ResourceInUse):
            store.create_cluster(replace(make_cluster("abcdefghij08", rec.name), region="us-east-1"))
        assert {c.region for c in store.list_clusters(ACCOUNT)} == {"us-east-1", "ap-northeast-1"}
        assert list(store.audit.iter_all()) == []
    finally:
        store.close()
