"""``SqlStore`` on SQLite (temp file) and a real PostgreSQL (fresh database per test): one suite, both backends."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

import slurmpod.store.sql as sqlmod
from slurmpod.domain.model import ClusterRecord, ClusterSummary, EventDetails, EventRecord, GroupScaling, NodeRecord
from slurmpod.domain.spec import (
    CapacitySize,
    CapacitySizeType,
    ClusterSpec,
    DeepHealthCheck,
    DeploymentSpec,
    InstanceGroupSpec,
    LifeCycleConfig,
    NodeProvisioningMode,
    NodeRecovery,
    ScheduledUpdateSpec,
    SlurmConfig,
    Tag,
)
from slurmpod.domain.status import (
    ClusterStatus,
    EventLevel,
    InstanceStatus,
    NodeType,
    ResourceType,
    SlurmConfigStrategy,
)
from slurmpod.errors import ResourceInUse, VersionConflict
from slurmpod.store import SqlStore, migrate
from slurmpod.store.tables import metadata

ACCOUNT = "123456789012"
OTHER_ACCOUNT = "210987654321"
REGION = "us-west-2"
TABLES = {"clusters", "nodes", "events", "settings_kv", "leases"}


# ---- fixtures: ``store_url`` and ``store`` (SQLite and PostgreSQL) are in conftest.py -----------------------


# ---- builders -----------------------------------------------------------------------------------------


def make_spec(name: str = "alpha") -> ClusterSpec:
    lcc = LifeCycleConfig(source_s3_uri="s3://bucket/lcc/", on_create="on_create.sh")
    return ClusterSpec(
        name=name,
        instance_groups=(
            InstanceGroupSpec(
                name="controller",
                instance_count=1,
                instance_type="ml.c5.xlarge",
                execution_role="arn:aws:iam::123456789012:role/exec",
                life_cycle_config=lcc,
                threads_per_core=1,
                slurm_config=SlurmConfig(node_type=NodeType.CONTROLLER),
            ),
            InstanceGroupSpec(
                name="workers",
                instance_count=4,
                instance_type="ml.g5.xlarge",
                execution_role="arn:aws:iam::123456789012:role/exec",
                min_instance_count=2,
                life_cycle_config=LifeCycleConfig(source_s3_uri="s3://b/x", on_init_complete="done.sh"),
                threads_per_core=2,
                slurm_config=SlurmConfig(node_type=NodeType.COMPUTE, partition_names=("gpu", "debug")),
                image_id="ami-0123456789abcdef0",
                scheduled_update=ScheduledUpdateSpec("cron(0 3 ? * MON *)", DeploymentSpec(
                    batch=CapacitySize(CapacitySizeType.CAPACITY_PERCENTAGE, 50), wait_seconds=0,
                    rollback_alarms=("a1",))),
                deep_health_checks=(DeepHealthCheck.INSTANCE_STRESS, DeepHealthCheck.INSTANCE_CONNECTIVITY),
                extras={
                    "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}],
                },
            ),
            InstanceGroupSpec(name="bare", instance_count=0),
        ),
        node_provisioning_mode=NodeProvisioningMode.CONTINUOUS,
        node_recovery=NodeRecovery.AUTOMATIC,
        slurm_config_strategy=SlurmConfigStrategy.MERGE,
        has_orchestrator=True,
        tags=(Tag("slurmpod:webhook", "http://127.0.0.1:9/hook"), Tag("k", "")),
        extras={"VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]},
                "Note": "ünïcödé ✓", "Nested": {"a": [1, 2.5, None, True, {"b": "c"}]}},
    )


def make_cluster(cluster_id: str = "abcdefghij01", name: str = "alpha", account: str = ACCOUNT) -> ClusterRecord:
    spec = make_spec(name)
    return ClusterRecord(
        cluster_id=cluster_id,
        account_id=account,
        region=REGION,
        name=name,
        arn=f"arn:aws:sagemaker:{REGION}:{account}:cluster/{cluster_id}",
        spec=spec,
        status=ClusterStatus.CREATING,
        creation_time=1_700_000_000.123456,
        last_good_spec=replace(spec, instance_groups=spec.instance_groups[:1]),
        failure_message=None,
        operation_id="0b9e2f8e-0000-4000-8000-000000000001",
        applied_topology="0" * 64,
        generation=1,
        version=1,
        lifecycle_snapshots={"controller": "sha256:" + "a" * 64, "workers": "sha256:" + "b" * 64},
        provider="simulated",
    )


def make_node(cluster_id: str, seq: int, group: str = "workers", instance_id: str | None = None) -> NodeRecord:
    return NodeRecord(
        instance_id=instance_id or f"i-{cluster_id}{seq:05d}",
        cluster_id=cluster_id,
        group=group,
        seq=seq,
        status=InstanceStatus.PENDING,
        launch_time=1_700_000_100.5 + seq,
        message="launching",
        ip=f"10.1.0.{seq}",
        hostname=f"ip-10-1-0-{seq}",
        logical_id=f"{group}-{seq}",
        image_id="ami-0123456789abcdef0",
        image_release="2025.01.01",
        lifecycle_digest="sha256:" + "b" * 64,
        last_software_update_time=1_700_000_200.25,
        phases=("launched", "baseline"),
        attempts=2,
        next_attempt=1_700_000_300.75,
        data={"netns": f"sp-{seq}", "ports": [22, 6818], "nested": {"ok": True}},
        version=1,
    )


_event_counter = iter(range(1, 10**9))


def make_event(cluster: ClusterRecord, description: str = "something happened", *, t: float = 1.0,
               instance_id: str | None = None) -> EventRecord:
    n = next(_event_counter)
    return EventRecord(
        event_id=f"00000000-0000-4000-8000-{n:012d}",
        cluster_id=cluster.cluster_id,
        cluster_name=cluster.name,
        cluster_arn=cluster.arn,
        resource_type=ResourceType.INSTANCE if instance_id else ResourceType.CLUSTER,
        level=EventLevel.INFO,
        description=description,
        event_time=t,
        group="workers" if instance_id else None,
        instance_id=instance_id,
        operation_id=cluster.operation_id,
        details=EventDetails(failure_message=f"why {n}: ünïcödé", scaling=GroupScaling(n, 4, 2)),
    )


def same_event(stored: EventRecord, original: EventRecord) -> bool:
    return stored == replace(original, seq=stored.seq)


# ---- migrations ---------------------------------------------------------------------------------------


def _head() -> str:
    head = ScriptDirectory(str(Path(sqlmod.__file__).with_name("migrations"))).get_current_head()
    assert head is not None
    return head


def _versions(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(sa.text("SELECT version_num FROM alembic_version"))]


def test_upgrade_head_from_empty_and_twice_is_noop(store_url: str) -> None:
    bare = sqlmod.make_engine(store_url)
    try:
        assert not (TABLES & set(sa.inspect(bare).get_table_names())), "database must start empty"
    finally:
        bare.dispose()

    s = SqlStore(store_url)  # migrates
    try:
        assert TABLES | {"alembic_version"} <= set(sa.inspect(s.engine).get_table_names())
        assert _versions(s.engine) == [_head()]
        rec = make_cluster()
        s.create_cluster(rec, [make_event(rec)])
        s.put_setting("k", {"v": 1})

        migrate(s.engine)  # second run: no-op
        assert _versions(s.engine) == [_head()]
        assert s.get_cluster(rec.cluster_id) == rec
        assert s.get_setting("k") == {"v": 1}
        assert len(s.list_events(rec.cluster_id)) == 1
    finally:
        s.close()

    again = SqlStore(store_url)  # a restarted server migrates again and sees the data
    try:
        assert _versions(again.engine) == [_head()]
        assert again.get_cluster("abcdefghij01") is not None
    finally:
        again.close()


def test_migrated_schema_matches_tables_module(store: SqlStore) -> None:
    """alembic's autogenerate diff between the migrated database and ``tables.metadata`` is empty."""
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


# ---- clusters -----------------------------------------------------------------------------------------


def test_cluster_round_trip_create_get_find_list(store: SqlStore) -> None:
    rec = make_cluster()
    store.create_cluster(rec)
    got = store.get_cluster(rec.cluster_id)
    assert got == rec
    assert got is not None
    # nested pieces survive JSON: tuples stay tuples, enums stay enums, extras stay dicts
    workers = got.spec.group("workers")
    assert workers is not None and workers.slurm_config is not None
    assert workers.slurm_config.partition_names == ("gpu", "debug")
    assert workers.node_type is NodeType.COMPUTE
    assert workers.extras["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["VolumeSizeInGB"] == 500
    assert got.spec.extras["Note"] == "ünïcödé ✓"
    assert got.spec.slurm_config_strategy is SlurmConfigStrategy.MERGE
    assert got.last_good_spec == rec.last_good_spec
    assert got.creation_time == rec.creation_time
    assert dict(got.lifecycle_snapshots) == dict(rec.lifecycle_snapshots)

    assert store.find_cluster(ACCOUNT, REGION, "alpha") == rec
    assert store.find_cluster(ACCOUNT, "ap-northeast-1", "alpha") is None
    assert store.find_cluster(OTHER_ACCOUNT, REGION, "alpha") is None
    assert store.find_cluster(ACCOUNT, REGION, "beta") is None
    assert store.get_cluster("nosuchcluste") is None

    minimal = ClusterRecord(cluster_id="abcdefghij02", account_id=ACCOUNT, region=REGION, name="beta",
                            arn="arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdefghij02",
                            spec=ClusterSpec(name="beta"), status=ClusterStatus.IN_SERVICE, creation_time=0.0)
    store.create_cluster(minimal)
    assert store.get_cluster("abcdefghij02") == minimal
    other = make_cluster("abcdefghij03", "gamma", OTHER_ACCOUNT)
    store.create_cluster(other)

    assert {c.cluster_id for c in store.list_clusters()} == {"abcdefghij01", "abcdefghij02", "abcdefghij03"}
    assert sorted(c.name for c in store.list_clusters(ACCOUNT)) == ["alpha", "beta"]
    assert store.list_clusters(OTHER_ACCOUNT) == [other]
    assert store.list_clusters("000000000000") == []
    assert sorted(store.cluster_ids()) == ["abcdefghij01", "abcdefghij02", "abcdefghij03"]


def test_duplicate_name_in_account_is_resource_in_use(store: SqlStore) -> None:
    first = make_cluster("abcdefghij01", "alpha")
    store.create_cluster(first, [make_event(first)])
    dup = make_cluster("abcdefghij02", "alpha")
    with pytest.raises(ResourceInUse):
        store.create_cluster(dup, [make_event(dup, "should not be stored")])
    assert store.get_cluster("abcdefghij02") is None
    assert store.list_events("abcdefghij02") == []

    # the same name under another account is a different cluster
    elsewhere = make_cluster("abcdefghij03", "alpha", OTHER_ACCOUNT)
    store.create_cluster(elsewhere)
    assert store.find_cluster(OTHER_ACCOUNT, REGION, "alpha") == elsewhere
    assert store.find_cluster(ACCOUNT, REGION, "alpha") == first
    # and so is the same name in another region of the same account
    tokyo = replace(make_cluster("abcdefghij04", "alpha"), region="ap-northeast-1",
                    arn="arn:aws:sagemaker:ap-northeast-1:123456789012:cluster/abcdefghij04")
    store.create_cluster(tokyo)
    assert store.find_cluster(ACCOUNT, "ap-northeast-1", "alpha") == tokyo
    assert store.find_cluster(ACCOUNT, REGION, "alpha") == first
    assert [c.cluster_id for c in store.list_clusters(ACCOUNT, "ap-northeast-1")] == ["abcdefghij04"]


def test_cluster_summaries_are_the_account_regions_clusters_by_creation_time(store: SqlStore) -> None:
    """ListClusters' read: the summary columns of the account's clusters in one region, oldest first."""
    late = replace(make_cluster("abcdefghij01", "late"), creation_time=2000.0, status=ClusterStatus.IN_SERVICE)
    early = replace(make_cluster("abcdefghij02", "early"), creation_time=1000.0)
    store.create_cluster(late)
    store.create_cluster(early)
    store.create_cluster(make_cluster("abcdefghij03", "theirs", OTHER_ACCOUNT))
    store.create_cluster(replace(make_cluster("abcdefghij04", "tokyo"), region="ap-northeast-1"))

    got = store.list_cluster_summaries(ACCOUNT, REGION)
    assert got == [ClusterSummary("abcdefghij02", "early", early.arn, early.status, 1000.0),
                   ClusterSummary("abcdefghij01", "late", late.arn, ClusterStatus.IN_SERVICE, 2000.0)]
    assert [s.name for s in store.list_cluster_summaries(ACCOUNT, "ap-northeast-1")] == ["tokyo"]
    assert store.list_cluster_summaries("000000000000", REGION) == []


@pytest.mark.parametrize("by_name", [True, False])
@pytest.mark.parametrize("descending", [True, False])
def test_cluster_summary_pages_walk_the_same_order_as_python(store: SqlStore, by_name: bool,
                                                              descending: bool) -> None:
    """``page_cluster_summaries``: keyset pages in SQL, names by code point (upper case, digits and hyphens
    included) on both dialects, the account's region only, creation-time windows exclusive."""
    names = ["b", "B", "a-b", "ab", "A1", "a", "Zz", "z-9", "0x", "a-a"]
    for i, name in enumerate(names):
        store.create_cluster(replace(make_cluster(f"abcdefgh{i:04d}", name), creation_time=1000.0 + (i * 7) % 10))
    store.create_cluster(make_cluster("abcdefghzz01", "theirs", OTHER_ACCOUNT))
    summaries = store.list_cluster_summaries(ACCOUNT, REGION)
    key = (lambda s: (s.name, s.cluster_id)) if by_name else (lambda s: (s.creation_time, s.cluster_id))
    expected = sorted(summaries, key=key, reverse=descending)
    walked, after = [], None
    while True:
        page = store.page_cluster_summaries(ACCOUNT, REGION, by_name=by_name, descending=descending,
                                            after=after, limit=3)
        walked += page
        if len(page) < 3:
            break
        after = list(key(page[-1]))
    assert walked == expected
    window = store.page_cluster_summaries(ACCOUNT, REGION, by_name=by_name, descending=descending, after=None,
                                          limit=100, created_after=1002.0, created_before=1007.0)
    assert window == [s for s in expected if 1002.0 < s.creation_time < 1007.0] and len(window) == 4


def test_cluster_version_conflict_first_writer_wins(store: SqlStore) -> None:
    store.create_cluster(make_cluster())
    a = store.get_cluster("abcdefghij01")
    b = store.get_cluster("abcdefghij01")
    assert a is not None and b is not None and a.version == b.version == 1

    written = store.update_cluster(replace(a, status=ClusterStatus.IN_SERVICE, generation=2))
    assert written.version == 2
    assert store.get_cluster("abcdefghij01") == written

    with pytest.raises(VersionConflict):
        store.update_cluster(replace(b, status=ClusterStatus.FAILED, failure_message="loser"))
    now = store.get_cluster("abcdefghij01")
    assert now == written
    assert now is not None and now.status is ClusterStatus.IN_SERVICE and now.failure_message is None

    # re-read and retry succeeds
    again = store.update_cluster(replace(now, failure_message="second"))
    assert again.version == 3
    assert store.get_cluster("abcdefghij01") == again


def test_update_of_missing_cluster_is_a_conflict(store: SqlStore) -> None:
    with pytest.raises(VersionConflict):
        store.update_cluster(make_cluster("zzzzzzzzzzzz", "ghost"))
    assert store.get_cluster("zzzzzzzzzzzz") is None


def test_node_version_conflict_first_writer_wins(store: SqlStore) -> None:
    c = make_cluster()
    store.create_cluster(c)
    store.add_nodes([make_node(c.cluster_id, 1)])
    iid = make_node(c.cluster_id, 1).instance_id
    a = store.get_node(iid)
    b = store.get_node(iid)
    assert a is not None and b is not None

    ev = make_event(c, "node running", instance_id=iid)
    written = store.update_node(replace(a, status=InstanceStatus.RUNNING, phases=(*a.phases, "on_create")), [ev])
    assert written.version == 2
    assert store.get_node(iid) == written

    lost = make_event(c, "must not persist", instance_id=iid)
    with pytest.raises(VersionConflict):
        store.update_node(replace(b, status=InstanceStatus.FAILURE, message="loser"), [lost])
    assert store.get_node(iid) == written
    assert [e.event_id for e in store.list_events(c.cluster_id)] == [ev.event_id]


def test_update_cluster_with_nodes_commits_everything(store: SqlStore) -> None:
    c = make_cluster()
    store.create_cluster(c)
    store.add_nodes([make_node(c.cluster_id, 1)])
    n1 = store.list_nodes(c.cluster_id)[0]
    n2 = make_node(c.cluster_id, 2)
    ev = make_event(c, "scaled")

    written = store.update_cluster(
        replace(c, status=ClusterStatus.IN_SERVICE), [ev],
        new_nodes=[n2], changed_nodes=[replace(n1, status=InstanceStatus.RUNNING)],
    )
    assert written.version == 2 and store.get_cluster(c.cluster_id) == written
    got1, got2 = store.list_nodes(c.cluster_id)
    assert got1.status is InstanceStatus.RUNNING and got1.version == 2
    assert got2 == n2
    assert [same_event(e, ev) for e in store.list_events(c.cluster_id)] == [True]


def test_update_cluster_is_atomic_when_a_changed_node_is_stale(store: SqlStore) -> None:
    c = make_cluster()
    first_ev = make_event(c, "created")
    store.create_cluster(c, [first_ev])
    store.add_nodes([make_node(c.cluster_id, 1)])
    stale = store.list_nodes(c.cluster_id)[0]
    fresh = store.update_node(replace(stale, message="someone else won"))  # node now at version 2

    with pytest.raises(VersionConflict):
        store.update_cluster(
            replace(c, status=ClusterStatus.UPDATING, generation=5, failure_message="nope"),
            [make_event(c, "must not persist")],
            new_nodes=[make_node(c.cluster_id, 2), make_node(c.cluster_id, 3)],
            changed_nodes=[replace(stale, status=InstanceStatus.RUNNING)],
        )

    after = store.get_cluster(c.cluster_id)
    assert after == c  # version 1, generation 1, status CREATING: untouched
    assert store.list_nodes(c.cluster_id) == [fresh]
    assert store.max_node_seq(c.cluster_id) == 1
    events = store.list_events(c.cluster_id)
    assert len(events) == 1 and same_event(events[0], first_ev)


def test_update_cluster_is_atomic_when_the_cluster_is_stale(store: SqlStore) -> None:
    c = make_cluster()
    store.create_cluster(c)
    store.update_cluster(replace(c, generation=2))
    with pytest.raises(VersionConflict):
        store.update_cluster(replace(c, generation=3), [make_event(c)], new_nodes=[make_node(c.cluster_id, 1)])
    got = store.get_cluster(c.cluster_id)
    assert got is not None and got.generation == 2 and got.version == 2
    assert store.list_nodes(c.cluster_id) == []
    assert store.list_events(c.cluster_id) == []


# ---- nodes --------------------------------------------------------------------------------------------


def test_nodes_add_list_get_delete_max_seq(store: SqlStore) -> None:
    c = make_cluster()
    d = make_cluster("abcdefghij02", "beta")
    store.create_cluster(c)
    store.create_cluster(d)
    assert store.max_node_seq(c.cluster_id) == 0
    assert store.list_nodes(c.cluster_id) == []

    nodes = [make_node(c.cluster_id, s, group="controller" if s == 1 else "workers") for s in (3, 1, 7, 2)]
    launch_ev = make_event(c, "launched 4")
    store.add_nodes(nodes, [launch_ev])
    store.add_nodes([make_node(d.cluster_id, 40)])

    listed = store.list_nodes(c.cluster_id)
    assert [n.seq for n in listed] == [1, 2, 3, 7]  # ordered by launch order
    assert {n.instance_id for n in listed} == {n.instance_id for n in nodes}
    for n in nodes:
        assert store.get_node(n.instance_id) == n
    got = store.get_node(nodes[0].instance_id)
    assert got is not None and got.phases == ("launched", "baseline") and got.data["ports"] == [22, 6818]
    assert store.max_node_seq(c.cluster_id) == 7
    assert store.max_node_seq(d.cluster_id) == 40
    assert store.get_node("i-doesnotexist0000") is None

    minimal = NodeRecord(instance_id="i-0000000000000000a", cluster_id=c.cluster_id, group="workers", seq=8,
                         status=InstanceStatus.RUNNING, launch_time=0.0)
    store.add_nodes([minimal])
    assert store.get_node(minimal.instance_id) == minimal

    del_ev = make_event(c, "terminated", instance_id=nodes[2].instance_id)
    store.delete_node(nodes[2].instance_id, [del_ev])
    assert store.get_node(nodes[2].instance_id) is None
    assert [n.seq for n in store.list_nodes(c.cluster_id)] == [1, 2, 3, 8]
    assert [e.event_id for e in store.list_events(c.cluster_id)] == [launch_ev.event_id, del_ev.event_id]
    assert len(store.list_nodes(d.cluster_id)) == 1


def test_batch_node_reads_writes_and_deletes(store: SqlStore) -> None:
    """get_nodes / update_nodes / delete_nodes (the reconciler's batches): one transaction, and a node that changed
    since it was read is skipped with its events while the others are written."""
    c = make_cluster()
    store.create_cluster(c)
    nodes = [make_node(c.cluster_id, s) for s in (1, 2, 3)]
    store.add_nodes(nodes)
    got = store.get_nodes([n.instance_id for n in nodes] + ["i-doesnotexist0000"])
    assert got == {n.instance_id: n for n in nodes}
    assert store.get_nodes([]) == {}

    stale = store.update_node(replace(nodes[1], message="moved on"))  # nodes[1] as read is now stale
    evs = [make_event(c, f"running {k}", instance_id=n.instance_id) for k, n in enumerate(nodes)]
    out = store.update_nodes([(replace(n, status=InstanceStatus.RUNNING), [e])
                              for n, e in zip(nodes, evs, strict=True)])
    assert [o is None for o in out] == [False, True, False]
    assert out[0] is not None and out[0].version == 2 and store.get_node(nodes[0].instance_id) == out[0]
    assert store.get_node(nodes[1].instance_id) == stale
    assert [e.event_id for e in store.list_events(c.cluster_id)] == [evs[0].event_id, evs[2].event_id]
    assert store.update_nodes([]) == []

    gone = make_event(c, "terminated")
    store.delete_nodes([nodes[0].instance_id, nodes[2].instance_id], [gone])
    assert [n.instance_id for n in store.list_nodes(c.cluster_id)] == [nodes[1].instance_id]
    assert store.list_events(c.cluster_id)[-1].event_id == gone.event_id
    store.delete_nodes([])


# ---- events -------------------------------------------------------------------------------------------


def test_events_keep_insert_order_and_get_event(store: SqlStore) -> None:
    c = make_cluster()
    d = make_cluster("abcdefghij02", "beta")
    e0 = make_event(c, "creation started", t=50.0)
    store.create_cluster(c, [e0])
    store.create_cluster(d)
    # event_time deliberately decreasing: the order is the insert order (seq), not the time
    batch = [make_event(c, f"e{i}", t=40.0 - i) for i in range(5)]
    store.add_events(batch[:2])
    store.add_events([make_event(d, "other cluster")])
    store.add_events(batch[2:])
    node = make_node(c.cluster_id, 1)
    store.add_nodes([node])
    stored_node = store.get_node(node.instance_id)
    assert stored_node is not None
    via_node = make_event(c, "via update_node", t=1.0, instance_id=node.instance_id)
    store.update_node(replace(stored_node, status=InstanceStatus.RUNNING), [via_node])
    cur = store.get_cluster(c.cluster_id)
    assert cur is not None
    via_cluster = make_event(c, "via update_cluster", t=2.0)
    store.update_cluster(cur, [via_cluster])

    expected = [e0, *batch, via_node, via_cluster]
    got = store.list_events(c.cluster_id)
    assert [e.event_id for e in got] == [e.event_id for e in expected]
    assert all(same_event(g, x) for g, x in zip(got, expected, strict=True))
    seqs = [e.seq for e in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] > 0

    one = store.get_event(c.cluster_id, batch[3].event_id)
    assert one is not None and same_event(one, batch[3]) and one.seq == got[4].seq
    assert store.get_event(d.cluster_id, batch[3].event_id) is None  # wrong cluster
    assert store.get_event(c.cluster_id, "00000000-0000-4000-8000-ffffffffffff") is None
    assert [e.description for e in store.list_events(d.cluster_id)] == ["other cluster"]


# ---- delete -------------------------------------------------------------------------------------------


def test_delete_cluster_removes_nodes_and_events(store: SqlStore) -> None:
    c = make_cluster()
    d = make_cluster("abcdefghij02", "beta")
    store.create_cluster(c, [make_event(c)])
    store.create_cluster(d, [make_event(d)])
    store.add_nodes([make_node(c.cluster_id, 1), make_node(c.cluster_id, 2)], [make_event(c)])
    store.add_nodes([make_node(d.cluster_id, 1)])
    c_nodes = [n.instance_id for n in store.list_nodes(c.cluster_id)]
    c_events = [e.event_id for e in store.list_events(c.cluster_id)]

    store.delete_cluster(c.cluster_id)

    assert store.get_cluster(c.cluster_id) is None
    assert store.find_cluster(ACCOUNT, REGION, "alpha") is None
    assert store.list_nodes(c.cluster_id) == []
    assert all(store.get_node(i) is None for i in c_nodes)
    assert store.list_events(c.cluster_id) == []
    assert all(store.get_event(c.cluster_id, e) is None for e in c_events)
    assert store.max_node_seq(c.cluster_id) == 0
    # the other cluster is untouched and the name is free again
    assert store.get_cluster(d.cluster_id) == d
    assert len(store.list_nodes(d.cluster_id)) == 1 and len(store.list_events(d.cluster_id)) == 1
    store.create_cluster(make_cluster("abcdefghij09", "alpha"))
    assert store.integrity_check() == []
    store.delete_cluster("nosuchcluste")  # deleting a missing cluster is harmless


# ---- settings / health --------------------------------------------------------------------------------


def test_settings_get_put_overwrite(store: SqlStore) -> None:
    assert store.get_setting("missing") is None
    store.put_setting("image", {"id": "ami-1", "release": "2025.01.01", "list": [1, 2]})
    assert store.get_setting("image") == {"id": "ami-1", "release": "2025.01.01", "list": [1, 2]}
    store.put_setting("image", {"id": "ami-2"})
    assert store.get_setting("image") == {"id": "ami-2"}
    store.put_setting("count", 3)
    store.put_setting("flag", False)
    store.put_setting("text", "hello")
    assert (store.get_setting("count"), store.get_setting("flag"), store.get_setting("text")) == (3, False, "hello")
    assert store.get_setting("image") == {"id": "ami-2"}


def test_integrity_check_and_ping(store: SqlStore) -> None:
    assert store.ping() is True
    assert store.integrity_check() == []
    c = make_cluster()
    store.create_cluster(c, [make_event(c)])
    store.add_nodes([make_node(c.cluster_id, 1)])
    assert store.integrity_check() == []
    # an orphaned node row (its cluster is gone) is reported
    store.add_nodes([make_node("orphan000001", 1)])
    problems = store.integrity_check()
    assert len(problems) == 1 and "without a cluster" in problems[0]


# ---- concurrency --------------------------------------------------------------------------------------


def _run_threads(n: int, target: Callable[[int], object]) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def wrapped(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer thread hung"
    return errors


def test_concurrent_cluster_writers_lose_no_increment(store: SqlStore) -> None:
    threads, per_thread = 8, 50
    c = make_cluster()
    store.create_cluster(c)
    conflicts = [0] * threads

    def writer(i: int) -> None:
        for k in range(per_thread):
            while True:
                cur = store.get_cluster(c.cluster_id)
                assert cur is not None
                try:
                    store.update_cluster(replace(cur, generation=cur.generation + 1),
                                         [make_event(c, f"w{i}-{k}")])
                    break
                except VersionConflict:
                    conflicts[i] += 1

    errors = _run_threads(threads, writer)
    assert errors == []
    final = store.get_cluster(c.cluster_id)
    total = threads * per_thread
    assert final is not None
    assert final.generation == 1 + total
    assert final.version == 1 + total
    evs = store.list_events(c.cluster_id)
    assert len(evs) == total  # exactly one event per successful write; losers' events rolled back
    assert len({e.seq for e in evs}) == total


def test_concurrent_node_writers_lose_no_increment(store: SqlStore) -> None:
    threads, per_thread = 8, 25
    c = make_cluster()
    store.create_cluster(c)
    node = replace(make_node(c.cluster_id, 1), attempts=0)
    store.add_nodes([node])

    def writer(_i: int) -> None:
        for _k in range(per_thread):
            while True:
                cur = store.get_node(node.instance_id)
                assert cur is not None
                try:
                    store.update_node(replace(cur, attempts=cur.attempts + 1))
                    break
                except VersionConflict:
                    pass

    errors = _run_threads(threads, writer)
    assert errors == []
    final = store.get_node(node.instance_id)
    assert final is not None
    assert final.attempts == threads * per_thread
    assert final.version == 1 + threads * per_thread


def test_concurrent_create_same_name_exactly_one_wins(store: SqlStore) -> None:
    threads = 8
    outcomes: list[str] = []
    lock = threading.Lock()

    def creator(i: int) -> None:
        rec = make_cluster(f"abcdefghij{i:02d}", "racer")
        try:
            store.create_cluster(rec, [make_event(rec)])
            result = "won"
        except ResourceInUse:
            result = "in-use"
        with lock:
            outcomes.append(result)

    assert _run_threads(threads, creator) == []
    assert sorted(outcomes) == ["in-use"] * (threads - 1) + ["won"]
    assert len(store.list_clusters(ACCOUNT)) == 1
    winner = store.find_cluster(ACCOUNT, REGION, "racer")
    assert winner is not None
    assert sum(len(store.list_events(f"abcdefghij{i:02d}")) for i in range(threads)) == 1


def test_concurrent_first_put_setting(store: SqlStore) -> None:
    """Writers racing to create the same new key all succeed (last write wins), none sees an IntegrityError."""
    threads = 8
    for round_ in range(10):
        key = f"race-{round_}"
        assert _run_threads(threads, lambda i, key=key: store.put_setting(key, {"writer": i})) == []
        value = store.get_setting(key)
        assert isinstance(value, dict) and value["writer"] in range(threads)


def test_bulk_reads_match_one_at_a_time(store: SqlStore) -> None:
    """``get_clusters``/``nodes_fingerprints`` (a reconcile pass's reads per chunk of clusters) answer as
    ``get_cluster``/``nodes_fingerprint`` do for each; missing clusters and clusters without nodes are absent."""
    a, b = make_cluster("cluster00001", "a"), make_cluster("cluster00002", "b")
    store.create_cluster(a)
    store.create_cluster(b)
    store.add_nodes([make_node(a.cluster_id, s) for s in (1, 2, 3)])
    store.update_node(store.list_nodes(a.cluster_id)[1])
    got = store.get_clusters([a.cluster_id, b.cluster_id, "nosuchcluster"])
    assert got == {a.cluster_id: store.get_cluster(a.cluster_id), b.cluster_id: store.get_cluster(b.cluster_id)}
    prints = store.nodes_fingerprints([a.cluster_id, b.cluster_id])
    assert prints == {a.cluster_id: store.nodes_fingerprint(a.cluster_id)}
    assert store.nodes_fingerprint(b.cluster_id) == (0, 0, 0, 0)
    assert store.get_clusters([]) == {} and store.nodes_fingerprints([]) == {}
