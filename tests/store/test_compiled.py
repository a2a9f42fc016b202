"""``store.compiled.RawReads``: Core statements run on the pool's DBAPI connection, on SQLite and PostgreSQL.

What must hold: the same rows as Core's execute (a literal in the statement included); on PostgreSQL the pooled
connection comes back out of autocommit, so the next write transaction is a transaction; a database error is
SQLAlchemy's exception, and the pool stays usable after it.
"""

from __future__ import annotations

import pytest
from sqlalchemy import bindparam, select, text
from sqlalchemy.exc import DBAPIError

from slurmpod.store.compiled import RawReads
from slurmpod.store.sql import SqlStore
from slurmpod.store.tables import settings_kv


def test_rows_match_core_including_literals(store: SqlStore) -> None:
    for key in ("a", "b", "c"):
        store.put_setting(key, {"k": key})
    raw = RawReads(store.engine)
    c = settings_kv.c
    statement = (select(c.key, c.value).where(c.key != "b")  # a literal: a bind parameter with its own value
                 .where(c.key >= bindparam("k_from")).order_by(c.key))
    with store.engine.connect() as conn:
        core = [tuple(r) for r in conn.execute(statement, {"k_from": "a"})]
    assert list(raw.rows(statement, {"k_from": "a"})) == core == [("a", '{"k":"a"}'), ("c", '{"k":"c"}')]
    assert raw.first(statement, {"k_from": "d"}) is None
    assert raw.first(statement, {"k_from": "b"}) == ("c", '{"k":"c"}')


def test_connections_return_to_the_pool_ready_for_transactions(store: SqlStore) -> None:
    raw = RawReads(store.engine)
    q = select(settings_kv.c.key)
    for _ in range(30):  # more reads than the pool has connections: each was returned
        raw.rows(q, {})
    fairy = store.engine.raw_connection()
    try:
        assert not getattr(fairy.dbapi_connection, "autocommit", False)  # PostgreSQL: switched back
    finally:
        fairy.close()
    # a write transaction that fails part-way still rolls back whole (it is a transaction, not autocommit)
    with pytest.raises(RuntimeError), store.engine.begin() as conn:
        conn.execute(settings_kv.insert().values(key="half", value="1"))
        raise RuntimeError("abort")
    assert store.get_setting("half") is None


def test_a_database_error_is_sqlalchemys_and_the_pool_stays_usable(store: SqlStore) -> None:
    raw = RawReads(store.engine)
    bad = select(text("no_such_column")).select_from(settings_kv)
    with pytest.raises(DBAPIError):
        raw.rows(bad, {})
    store.put_setting("after", 1)
    assert store.get_setting("after") == 1
    assert [r[0] for r in raw.rows(select(settings_kv.c.key), {})] == ["after"]


def test_statements_in_a_transaction(store: SqlStore) -> None:
    from sqlalchemy import insert, update
    from sqlalchemy.exc import IntegrityError

    from slurmpod.store.compiled import execute, executemany

    c = settings_kv.c
    with store.engine.begin() as conn:
        executemany(conn, insert(settings_kv), [{"key": "a", "value": "1"}, {"key": "b", "value": "2"}], insert=True)
        res = execute(conn, update(settings_kv).where(c.key != "zzz").values(value=bindparam("k_v")), {"k_v": "3"})
        assert res.rowcount == 2 and res.first() is None
        assert execute(conn, select(c.value).where(c.key == bindparam("k")), {"k": "a"}).first() == ("3",)
    with pytest.raises(IntegrityError), store.engine.begin() as conn:  # SQLAlchemy's, as Core raises it
        execute(conn, insert(settings_kv), {"key": "c", "value": "4"}, insert=True)
        execute(conn, insert(settings_kv), {"key": "a", "value": "5"}, insert=True)
    assert store.get_setting("c") is None  # the whole transaction rolled back
    assert store.get_setting("a") == 3


def test_what_only_core_can_run_is_refused_when_compiling(store: SqlStore) -> None:
    from sqlalchemy import insert

    from slurmpod.store.compiled import Compiled
    from slurmpod.store.tables import nodes

    with pytest.raises(ValueError, match="Python-side defaults"):  # nodes.phases etc. have defaults
        Compiled(store.engine.dialect, insert(nodes), ["instance_id", "cluster_id"])
    with pytest.raises(ValueError, match="IN"):
        Compiled(store.engine.dialect, select(nodes.c.seq).where(nodes.c.status.in_(["a", "b"])))


def test_in_chunks_pad_to_a_few_sizes() -> None:
    from slurmpod.store.compiled import IN_SIZES, in_chunks

    assert list(in_chunks([])) == []
    assert list(in_chunks(["a"])) == [(1, {"k_in0": "a"})]
    assert list(in_chunks(["a", "b"], "k_g")) == [(4, {"k_g0": "a", "k_g1": "b", "k_g2": "b", "k_g3": "b"})]
    top = IN_SIZES[-1]
    chunks = list(in_chunks([str(i) for i in range(top + 5)]))
    assert [size for size, _ in chunks] == [top, 16]
    assert list(chunks[1][1].values()) == [str(i) for i in range(top, top + 5)] + [str(top + 4)] * 11


@pytest.mark.parametrize("count", [0, 1, 3, 5, 17, 300])
def test_reads_over_a_list_of_ids_find_each_once(store: SqlStore, count: int) -> None:
    """get_clusters, nodes_fingerprints, get_nodes, list_nodes(groups=...) and any_node over lists that cross
    ``IN_SIZES`` (and the largest, in two chunks): every match once, none that does not match."""
    from slurmpod.domain.status import InstanceStatus
    from tests.store.test_store import make_cluster, make_node

    ids = [f"c{i:011d}" for i in range(count)]
    for i, cid in enumerate(ids):
        store.create_cluster(make_cluster(cid, name=f"n{i}"))
    store.add_nodes([make_node(ids[0], s, group=f"g{s % 7}") for s in range(1, 41)] if ids else [])
    asked = [*ids, "absent000000"]
    assert sorted(store.get_clusters(asked)) == ids
    prints = store.nodes_fingerprints(asked)
    assert list(prints) == ids[:1] and (prints[ids[0]][0] if ids else 40) == 40
    if not ids:
        return
    node_ids = [f"i-{ids[0]}{s:05d}" for s in range(1, 41)]
    assert sorted(store.get_nodes([*node_ids, "i-none"])) == node_ids
    groups = ["g0", "g3", "g5", "nothing"]
    assert [n.seq for n in store.list_nodes(ids[0], groups=groups)] == [
        s for s in range(1, 41) if s % 7 in (0, 3, 5)]
    assert store.list_nodes(ids[0], groups=[]) == []
    found = store.any_node(ids[0], ["nothing", "g3"], InstanceStatus.PENDING)
    assert found is not None and found.group == "g3"
    assert store.any_node(ids[0], ["g3"], InstanceStatus.RUNNING) is None


@pytest.mark.parametrize("count", [1, 2, 101, 250])
def test_inserting_many_rows_writes_each_once(store: SqlStore, count: int) -> None:
    """``executemany(insert=True)``: every row once (PostgreSQL: one INSERT from unnest(arrays)); a duplicate key
    anywhere rolls the whole transaction back."""
    from sqlalchemy import insert
    from sqlalchemy.exc import IntegrityError

    from slurmpod.store.compiled import executemany

    rows = [{"key": f"k{i:04d}", "value": str(i)} for i in range(count)]
    with store.engine.begin() as conn:
        executemany(conn, insert(settings_kv), rows, insert=True)
    assert [store.get_setting(r["key"]) for r in rows] == list(range(count))
    with pytest.raises(IntegrityError), store.engine.begin() as conn:
        executemany(conn, insert(settings_kv), [{"key": "new", "value": "1"}, *rows[-1:]], insert=True)
    assert store.get_setting("new") is None


def test_inserted_nodes_read_back_equal_with_columns_all_null(store: SqlStore) -> None:
    """Several node rows in one insert, then one update, nullable columns None in every row (an all-NULL array on
    PostgreSQL)."""
    from dataclasses import replace

    from tests.store.test_store import make_cluster, make_node

    store.create_cluster(make_cluster("abcdefghij01"))
    recs = [replace(make_node("abcdefghij01", s), message=None, ip=None, last_software_update_time=None)
            for s in range(1, 4)]
    store.add_nodes(recs)
    assert store.list_nodes("abcdefghij01") == recs
    out = store.update_nodes([(replace(r, hostname=None, phases=("launched",)), []) for r in recs])
    assert store.list_nodes("abcdefghij01") == out and all(o is not None and o.version == 2 for o in out)


def test_a_batch_reads_as_its_reads_one_by_one(store: SqlStore) -> None:
    """``RawReads.batch`` (PostgreSQL: one pipeline) gives each read's rows, empty ones included; an error in any
    read is SQLAlchemy's, and the pool stays usable after it (the connection of a failed pipeline is dropped)."""
    for key in ("a", "b", "c"):
        store.put_setting(key, key.upper())
    raw = RawReads(store.engine)
    c = settings_kv.c
    one = select(c.value).where(c.key == bindparam("k"))
    every = select(c.key).order_by(c.key)
    reads = [(one, {"k": "b"}), (one, {"k": "none"}), (every, {}), (one, {"k": "a"})]
    assert raw.batch(reads) == [raw.rows(q, p) for q, p in reads] == [
        [('"B"',)], [], [("a",), ("b",), ("c",)], [('"A"',)]]
    bad = select(text("no_such_column")).select_from(settings_kv)
    for _ in range(3):
        with pytest.raises(DBAPIError):
            raw.batch([(one, {"k": "a"}), (bad, {}), (every, {})])
    store.put_setting("after", 1)
    assert store.get_setting("after") == 1
    assert len(raw.batch([(every, {})] * 40)[-1]) == 4


def test_cluster_view_is_describe_clusters_reads(store: SqlStore) -> None:
    """``cluster_view`` by id and by name: the record ``get_cluster``/``find_cluster`` give, the ``node_tally``
    and the setting; another account, region or name finds nothing."""
    from dataclasses import replace

    from slurmpod.domain.status import InstanceStatus
    from tests.store.test_store import make_cluster, make_node

    cid = "abcdefghij01"
    rec = make_cluster(cid, name="viewed")
    store.create_cluster(rec)
    store.create_cluster(make_cluster("abcdefghij02", name="other"))
    store.add_nodes([make_node(cid, s, group=f"g{s % 2}") for s in range(1, 6)]
                    + [replace(make_node(cid, 6), status=InstanceStatus.NOT_FOUND)])
    store.put_setting("images", [{"image_id": "ami-1"}])
    by_id = store.cluster_view(cluster_id=cid, setting="images")
    by_name = store.cluster_view(account_id=rec.account_id, region=rec.region, name="viewed", setting="images")
    tally = store.node_tally(cid)
    for got, tally_got, value in (by_id, by_name):
        assert got == store.get_cluster(cid) == store.find_cluster(rec.account_id, rec.region, "viewed")
        assert sorted((n.group, n.status) for n in tally_got) == sorted((n.group, n.status) for n in tally)
        assert len(tally_got) == 5 and value == [{"image_id": "ami-1"}]
    assert store.cluster_view(cluster_id=cid)[2] is None
    for missing in (store.cluster_view(cluster_id="abcdefghij09", setting="images"),
                    store.cluster_view(account_id="000000000000", region=rec.region, name="viewed"),
                    store.cluster_view(account_id=rec.account_id, region="eu-west-1", name="viewed"),
                    store.cluster_view(account_id=rec.account_id, region=rec.region, name="nothing")):
        assert missing[:2] == (None, [])
