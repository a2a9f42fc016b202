"""plan(): a replaced node's successor takes over its address (so its hostname ip-A-B-C-D and, for a compute node,
its Slurm NodeName) and, for a controller, its SlurmctldHost slot, and boots only once the predecessor has released
the address. Compute and login nodes take over only from a *replaced* node (BatchReplace, Action:Replace,
NodeRecovery), never from a deleted or scaled-down one."""

from __future__ import annotations

from dataclasses import replace

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, NodeRecovery, SlurmConfig
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType
from slurmpod.reconciler.plan import (
    BootNode,
    CreateNodes,
    NodeOp,
    Observation,
    RemoveNode,
    Takeover,
    controller_slot,
    plan,
)
from slurmpod.reconciler.topology import topology_key

SPEC = ClusterSpec(name="ha", instance_groups=(
    InstanceGroupSpec(name="ctl", instance_count=2, slurm_config=SlurmConfig(NodeType.CONTROLLER)),
    InstanceGroupSpec(name="work", instance_count=1, slurm_config=SlurmConfig(NodeType.COMPUTE, ("work",))),
))


def _cluster(spec: ClusterSpec = SPEC) -> ClusterRecord:
    return ClusterRecord(cluster_id="c1", account_id="123456789012", region="us-east-1", name="ha", arn="arn",
                         spec=spec, status=ClusterStatus.IN_SERVICE, creation_time=0.0,
                         applied_topology=topology_key(spec), last_good_spec=spec)


def _node(seq: int, group: str, status: InstanceStatus = InstanceStatus.RUNNING, **data: object) -> NodeRecord:
    return NodeRecord(instance_id=f"i-{seq}", cluster_id="c1", group=group, seq=seq, status=status, launch_time=0.0,
                      ip=f"10.0.0.{10 + seq}", hostname=f"ip-10-0-0-{10 + seq}", phases=("daemons", "joined"),
                      data=dict(data))


def _plan(nodes: tuple[NodeRecord, ...], spec: ClusterSpec = SPEC) -> list[object]:
    return plan(Observation(cluster=_cluster(spec), nodes=nodes, busy=frozenset(), now=100.0,
                            desired_topology=topology_key(spec)))


def test_successor_takes_over_address_and_slot() -> None:
    leaving = _node(1, "ctl", InstanceStatus.SHUTTING_DOWN)
    nodes = (leaving, _node(2, "ctl"), _node(3, "work"))
    creates = [a for a in _plan(nodes) if isinstance(a, CreateNodes)]
    assert creates == [CreateNodes("ctl", 1, (Takeover("10.0.0.11", "i-1", "ip-10-0-0-11", ctl_slot=1),))]


def test_successor_waits_for_the_address() -> None:
    leaving = _node(1, "ctl", InstanceStatus.SHUTTING_DOWN)
    successor = replace(_node(4, "ctl", InstanceStatus.PENDING, address="10.0.0.11", ctl_slot=1), ip=None,
                        hostname=None, phases=())
    nodes = (leaving, _node(2, "ctl"), _node(3, "work"), successor)
    assert not [a for a in _plan(nodes) if isinstance(a, BootNode) and a.instance_id == "i-4"]
    # once the predecessor's record is gone (terminated), the successor boots
    assert [a for a in _plan(nodes[1:]) if isinstance(a, BootNode) and a.instance_id == "i-4"]
    assert controller_slot(successor) == 1


def test_deleted_compute_nodes_are_not_taken_over() -> None:
    """A compute node leaving without being replaced (deleted, scaled down, its group resized meanwhile) frees its
    address: a node created in the same pass does not inherit its name."""
    nodes = (_node(1, "ctl"), _node(2, "ctl"), _node(3, "work", InstanceStatus.SHUTTING_DOWN))
    creates = [a for a in _plan(nodes) if isinstance(a, CreateNodes)]
    assert creates == [CreateNodes("work", 1)]


def test_replaced_compute_node_is_taken_over() -> None:
    """BatchReplace (the service marks the node ``replaced``): the successor keeps address, hostname, NodeName;
    no SlurmctldHost slot."""
    nodes = (_node(1, "ctl"), _node(2, "ctl"), _node(3, "work", InstanceStatus.SHUTTING_DOWN, replaced=True))
    creates = [a for a in _plan(nodes) if isinstance(a, CreateNodes)]
    assert creates == [CreateNodes("work", 1, (Takeover("10.0.0.13", "i-3", "ip-10-0-0-13"),))]


def test_compute_successor_waits_for_the_address_then_boots() -> None:
    leaving = _node(3, "work", InstanceStatus.SHUTTING_DOWN, replaced=True)
    successor = replace(_node(4, "work", InstanceStatus.PENDING, address="10.0.0.13", replaces="i-3"), ip=None,
                        hostname=None, phases=())
    nodes = (_node(1, "ctl"), _node(2, "ctl"), leaving, successor)
    actions = _plan(nodes)
    assert not [a for a in actions if isinstance(a, BootNode)]
    assert not [a for a in actions if isinstance(a, CreateNodes)]  # the successor already claims the address
    after = _plan((nodes[0], nodes[1], successor))  # the predecessor terminated: its record is gone
    assert [a for a in after if isinstance(a, BootNode)] == [BootNode("i-4")]


def test_one_successor_per_address() -> None:
    """Two replaced nodes, one successor already created: the next successor takes the other address."""
    spec = SPEC.with_groups((SPEC.instance_groups[0], replace(SPEC.instance_groups[1], instance_count=2)))
    a = _node(3, "work", InstanceStatus.SHUTTING_DOWN, replaced=True)
    b = _node(4, "work", InstanceStatus.SHUTTING_DOWN, replaced=True)
    first = replace(_node(5, "work", InstanceStatus.PENDING, address="10.0.0.13"), ip=None, phases=())
    creates = [x for x in _plan((_node(1, "ctl"), _node(2, "ctl"), a, b, first), spec) if isinstance(x, CreateNodes)]
    assert creates == [CreateNodes("work", 1, (Takeover("10.0.0.14", "i-4", "ip-10-0-0-14"),))]


def test_slurm_action_replace_removes_the_node_for_a_successor() -> None:
    """``op: replace`` (health: Slurm's Action:Replace) is a removal marked ``replaced``, not a NodeOp; a reboot
    stays a NodeOp."""
    nodes = (_node(1, "ctl"), _node(2, "ctl"), _node(3, "work", op="replace"))
    actions = _plan(nodes)
    assert RemoveNode("i-3", "Replaced (Slurm Action:Replace)", replaced=True) in actions
    assert not [a for a in actions if isinstance(a, NodeOp)]
    rebooting = (_node(1, "ctl"), _node(2, "ctl"), _node(3, "work", op="reboot"))
    assert NodeOp("i-3") in _plan(rebooting)


def test_node_recovery_replaces_a_failed_node_under_its_name() -> None:
    failed = replace(_node(3, "work", InstanceStatus.FAILURE), message="boom")
    removes = [a for a in _plan((_node(1, "ctl"), _node(2, "ctl"), failed)) if isinstance(a, RemoveNode)]
    assert removes == [RemoveNode("i-3", "boom", replaced=True)]
    manual = replace(SPEC, node_recovery=NodeRecovery.NONE)
    assert not [a for a in _plan((_node(1, "ctl"), _node(2, "ctl"), failed), manual) if isinstance(a, RemoveNode)]


def test_replaced_login_node_is_taken_over() -> None:
    spec = SPEC.with_groups((*SPEC.instance_groups,
                             InstanceGroupSpec(name="login", instance_count=1,
                                               slurm_config=SlurmConfig(NodeType.LOGIN))))
    nodes = (_node(1, "ctl"), _node(2, "ctl"), _node(3, "work"),
             _node(4, "login", InstanceStatus.SHUTTING_DOWN, replaced=True))
    creates = [a for a in _plan(nodes, spec) if isinstance(a, CreateNodes)]
    assert creates == [CreateNodes("login", 1, (Takeover("10.0.0.14", "i-4", "ip-10-0-0-14"),))]


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


def test_a_terminated_predecessor_still_hands_over_its_address() -> None:
    """A replaced node whose instance is already gone keeps its record (``terminated``) until a successor claims
    its address: a successor planned after a quick termination still gets the name, and boots at once."""
    gone = _node(3, "work", InstanceStatus.SHUTTING_DOWN, replaced=True, terminated=True)
    nodes = (_node(1, "ctl"), _node(2, "ctl"), gone)
    creates = [a for a in _plan(nodes) if isinstance(a, CreateNodes)]
    assert creates == [CreateNodes("work", 1, (Takeover("10.0.0.13", "i-3", "ip-10-0-0-13", ctl_slot=None),))]
    successor = replace(_node(4, "work", InstanceStatus.PENDING, address="10.0.0.13", replaces="i-3"), ip=None,
                        hostname=None, phases=())
    actions = _plan((*nodes, successor))
    assert [a for a in actions if isinstance(a, BootNode) and a.instance_id == "i-4"]  # no live holder
    assert [a for a in actions if isinstance(a, RemoveNode) and a.instance_id == "i-3"]  # the record goes now
