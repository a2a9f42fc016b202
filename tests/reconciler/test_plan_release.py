"""plan(): a cluster that releases every node (DeleteCluster, a failed creation) interrupts the boots in flight
(a lifecycle script would hold the node for up to its timeout) and removes every node that is not busy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, SlurmConfig
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType
from slurmpod.reconciler.plan import FinishDelete, InterruptNode, Observation, RemoveNode, plan, releasing
from slurmpod.reconciler.topology import topology_key

SPEC = ClusterSpec(name="c", instance_groups=(
    InstanceGroupSpec(name="ctl", instance_count=1, slurm_config=SlurmConfig(NodeType.CONTROLLER)),
    InstanceGroupSpec(name="work", instance_count=2, slurm_config=SlurmConfig(NodeType.COMPUTE, ("work",))),
))


def _cluster(status: ClusterStatus, last_good: ClusterSpec | None = None) -> ClusterRecord:
    return ClusterRecord(cluster_id="c1", account_id="123456789012", region="us-east-1", name="c", arn="arn",
                         spec=SPEC, status=status, creation_time=0.0, applied_topology=topology_key(SPEC),
                         last_good_spec=last_good)


def _node(seq: int, group: str, status: InstanceStatus) -> NodeRecord:
    return NodeRecord(instance_id=f"i-{seq}", cluster_id="c1", group=group, seq=seq, status=status, launch_time=0.0,
                      ip=f"10.0.0.{10 + seq}", hostname=f"ip-10-0-0-{10 + seq}", phases=("launched", "baseline"))


def _plan(cluster: ClusterRecord, nodes: tuple[NodeRecord, ...], busy: set[str]) -> list[object]:
    return plan(Observation(cluster=cluster, nodes=nodes, busy=frozenset(busy), now=100.0,
                            desired_topology=topology_key(SPEC)))


@pytest.mark.parametrize(("status", "last_good"), [(ClusterStatus.DELETING, None),
                                                   (ClusterStatus.DELETING, SPEC),
                                                   (ClusterStatus.ROLLING_BACK, None)])
def test_booting_nodes_of_a_released_cluster_are_interrupted(status: ClusterStatus,
                                                             last_good: ClusterSpec | None) -> None:
    cluster = _cluster(status, last_good)
    assert releasing(cluster)
    ctl = _node(1, "ctl", InstanceStatus.RUNNING)
    booting = _node(2, "work", InstanceStatus.PENDING)  # in its OnCreate (busy)
    queued = _node(3, "work", InstanceStatus.PENDING)  # not started
    actions = _plan(cluster, (ctl, booting, queued), {"i-2"})
    assert InterruptNode("i-2") in actions
    # a deleted cluster's controller goes once the other nodes are gone (test below)
    removed = {"i-3"} if status == ClusterStatus.DELETING else {"i-1", "i-3"}
    assert {a.instance_id for a in actions if isinstance(a, RemoveNode)} == removed
    assert not [a for a in actions if isinstance(a, FinishDelete)]


def test_a_deleted_cluster_removes_its_controllers_last() -> None:
    """The other nodes leave Slurm through a controller: it stays until they are gone."""
    cluster = _cluster(ClusterStatus.DELETING)
    ctl = _node(1, "ctl", InstanceStatus.RUNNING)
    work = (_node(2, "work", InstanceStatus.RUNNING), _node(3, "work", InstanceStatus.SHUTTING_DOWN))
    first = _plan(cluster, (ctl, *work), {"i-3"})  # i-3 is leaving (busy)
    assert [a.instance_id for a in first if isinstance(a, RemoveNode)] == ["i-2"]
    last = _plan(cluster, (ctl,), set())
    assert [a.instance_id for a in last if isinstance(a, RemoveNode)] == ["i-1"]
    assert [a for a in _plan(cluster, (), set()) if isinstance(a, FinishDelete)]


def test_a_busy_node_already_shutting_down_is_not_interrupted() -> None:
    """Its removal is the work in flight (a graceful stop): left to finish."""
    leaving = _node(2, "work", InstanceStatus.SHUTTING_DOWN)
    assert not [a for a in _plan(_cluster(ClusterStatus.DELETING), (leaving,), {"i-2"})
                if isinstance(a, InterruptNode)]


@pytest.mark.parametrize(("status", "last_good"), [(ClusterStatus.CREATING, None),
                                                   (ClusterStatus.UPDATING, SPEC),
                                                   (ClusterStatus.ROLLING_BACK, SPEC),
                                                   (ClusterStatus.IN_SERVICE, SPEC)])
def test_boots_of_a_cluster_that_keeps_its_nodes_are_never_interrupted(status: ClusterStatus,
                                                                      last_good: ClusterSpec | None) -> None:
    cluster = _cluster(status, last_good)
    assert not releasing(cluster)
    nodes = (_node(1, "ctl", InstanceStatus.RUNNING), replace(_node(2, "work", InstanceStatus.PENDING)))
    assert not [a for a in _plan(cluster, nodes, {"i-2"}) if isinstance(a, InterruptNode)]
