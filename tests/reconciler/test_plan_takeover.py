"""plan(): a replaced controller's successor takes over its address and SlurmctldHost slot, and boots only once
the predecessor has released the address."""

from __future__ import annotations

from dataclasses import replace

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, SlurmConfig
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType
from slurmpod.reconciler.plan import BootNode, CreateNodes, Observation, controller_slot, plan
from slurmpod.reconciler.topology import topology_key

SPEC = ClusterSpec(name="ha", instance_groups=(
    InstanceGroupSpec(name="ctl", instance_count=2, slurm_config=SlurmConfig(NodeType.CONTROLLER)),
    InstanceGroupSpec(name="work", instance_count=1, slurm_config=SlurmConfig(NodeType.COMPUTE, ("work",))),
))


def _cluster() -> ClusterRecord:
    return ClusterRecord(cluster_id="c1", account_id="123456789012", region="us-east-1", name="ha", arn="arn",
                         spec=SPEC, status=ClusterStatus.IN_SERVICE, creation_time=0.0,
                         applied_topology=topology_key(SPEC), last_good_spec=SPEC)


def _node(seq: int, group: str, status: InstanceStatus = InstanceStatus.RUNNING, **data: object) -> NodeRecord:
    return NodeRecord(instance_id=f"i-{seq}", cluster_id="c1", group=group, seq=seq, status=status, launch_time=0.0,
                      ip=f"10.0.0.{10 + seq}", hostname=f"ip-10-0-0-{10 + seq}", phases=("daemons", "joined"),
                      data=dict(data))


def _plan(nodes: tuple[NodeRecord, ...]) -> list[object]:
    return plan(Observation(cluster=_cluster(), nodes=nodes, busy=frozenset(), now=100.0,
                            desired_topology=topology_key(SPEC)))


def test_successor_takes_over_address_and_slot() -> None:
    leaving = _node(1, "ctl", InstanceStatus.SHUTTING_DOWN)
    nodes = (leaving, _node(2, "ctl"), _node(3, "work"))
    creates = [a for a in _plan(nodes) if isinstance(a, CreateNodes)]
    assert creates == [CreateNodes("ctl", 1, (("10.0.0.11", 1),))]


def test_successor_waits_for_the_address() -> None:
    leaving = _node(1, "ctl", InstanceStatus.SHUTTING_DOWN)
    successor = replace(_node(4, "ctl", InstanceStatus.PENDING, address="10.0.0.11", ctl_slot=1), ip=None,
                        hostname=None, phases=())
    nodes = (leaving, _node(2, "ctl"), _node(3, "work"), successor)
    assert not [a for a in _plan(nodes) if isinstance(a, BootNode) and a.instance_id == "i-4"]
    # once the predecessor's record is gone (terminated), the successor boots
    assert [a for a in _plan(nodes[1:]) if isinstance(a, BootNode) and a.instance_id == "i-4"]
    assert controller_slot(successor) == 1


def test_compute_groups_take_over_nothing() -> None:
    nodes = (_node(1, "ctl"), _node(2, "ctl"), _node(3, "work", InstanceStatus.SHUTTING_DOWN))
    creates = [a for a in _plan(nodes) if isinstance(a, CreateNodes)]
    assert creates == [CreateNodes("work", 1)]


def test_baseline_waits_until_every_controller_has_an_address() -> None:
    """resource_config.json (written in baseline, read by lifecycle scripts to find the controller) must name every
    controller: a worker booting faster than a controller waits for its launch."""
    from slurmpod.reconciler.plan import may_start_baseline

    pending = replace(_node(1, "ctl", InstanceStatus.PENDING), phases=(), ip=None)
    launched = replace(_node(2, "ctl", InstanceStatus.PENDING), phases=("launched",))
    worker = replace(_node(3, "work", InstanceStatus.PENDING), phases=("launched",))
    assert not may_start_baseline(_cluster(), (pending, launched, worker))
    assert may_start_baseline(_cluster(), (replace(pending, phases=("launched",)), launched, worker))
    gone = replace(pending, status=InstanceStatus.SHUTTING_DOWN)  # leaving controllers do not count
    assert may_start_baseline(_cluster(), (gone, launched, worker))
