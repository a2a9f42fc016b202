"""plan_health (pure), table-style: NodeRecovery, slurmd two strikes, Slurm's Action: requests, controllers,
leaks."""

from __future__ import annotations

from dataclasses import replace

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, NodeRecovery, SlurmConfig
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType
from slurmpod.reconciler.health import HealthReport, SlurmRequest, plan_health

SPEC = ClusterSpec(name="h", instance_groups=(
    InstanceGroupSpec(name="ctl", instance_count=2, slurm_config=SlurmConfig(NodeType.CONTROLLER)),
    InstanceGroupSpec(name="work", instance_count=2, slurm_config=SlurmConfig(NodeType.COMPUTE, ("work",))),
))


def _cluster(status: ClusterStatus = ClusterStatus.IN_SERVICE, recovery: NodeRecovery | None = None
             ) -> ClusterRecord:
    return ClusterRecord(cluster_id="c", account_id="1", region="us-east-1", name="h", arn="arn",
                         spec=replace(SPEC, node_recovery=recovery), status=status, creation_time=0.0)


NODES = tuple(NodeRecord(instance_id=f"i-{k}", cluster_id="c", group="ctl" if k < 2 else "work", seq=k,
                         status=InstanceStatus.RUNNING, launch_time=0.0, hostname=f"ip-{k}", version=3)
              for k in range(4))
ALL_ALIVE = {n.instance_id: True for n in NODES}


def _plan(report: HealthReport, *, cluster: ClusterRecord | None = None, nodes: tuple[NodeRecord, ...] = NODES,
          suspects: frozenset[str] = frozenset(), busy: frozenset[str] = frozenset(),
          leak_suspects: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
    return plan_health(report, cluster or _cluster(), nodes, suspects, busy, leak_suspects)


def test_healthy_cluster_changes_nothing() -> None:
    plan = _plan(HealthReport(alive=ALL_ALIVE))
    assert plan.changes == () and plan.leaks == () and plan.events == ()


def test_dead_worker_is_rebooted_by_automatic_recovery() -> None:
    (change,) = _plan(HealthReport(alive={**ALL_ALIVE, "i-2": False})).changes
    assert change.instance_id == "i-2" and change.version == 3 and change.set_data == {"op": "reboot"}
    assert change.fail_message is None and "rebooting" in change.events[0].description


def test_dead_worker_is_left_failed_without_recovery() -> None:
    (change,) = _plan(HealthReport(alive={**ALL_ALIVE, "i-3": False}),
                      cluster=_cluster(recovery=NodeRecovery.NONE)).changes
    assert change.fail_message and not change.set_data


def test_busy_or_operated_nodes_are_left_alone() -> None:
    report = HealthReport(alive={**ALL_ALIVE, "i-2": False, "i-3": False})
    nodes = (*NODES[:3], replace(NODES[3], data={"op": "refresh"}))
    assert _plan(report, nodes=nodes, busy=frozenset({"i-2"})).changes == ()


def test_slurmd_gone_counts_only_the_second_time() -> None:
    first = _plan(HealthReport(alive=ALL_ALIVE, unreachable=frozenset({"i-2"})))
    assert first.changes == () and first.suspects == {"i-2"}
    second = _plan(HealthReport(alive=ALL_ALIVE, unreachable=frozenset({"i-2"})), suspects=first.suspects)
    assert [c.set_data for c in second.changes] == [{"op": "reboot"}] and second.suspects == frozenset()


def test_slurm_action_requests_become_operations() -> None:
    requests = {"i-2": SlurmRequest("Replace"), "i-3": SlurmRequest("Reboot")}
    plan = _plan(HealthReport(alive=ALL_ALIVE, requests=requests))
    ops = {c.instance_id: c.set_data for c in plan.changes}
    # Replace: a new instance takes over the hostname (plan); Reboot: the same instance, resumed in Slurm
    assert ops == {"i-2": {"op": "replace"}, "i-3": {"op": "reboot", "resume_on_join": True}}
    assert all(c.fault is None for c in plan.changes)  # an operator's request is no fault


def test_health_agent_fault_is_replaced_with_hma_wording_and_counted() -> None:
    req = SlurmRequest("Replace", "NvidiaGPUUnhealthy", "GPU 0: Xid 79 (GPU has fallen off the bus)")
    (change,) = _plan(HealthReport(alive=ALL_ALIVE, requests={"i-2": req})).changes
    assert change.set_data == {"op": "replace"} and change.fault == ("NvidiaGPUUnhealthy", "Replace")
    (text,) = [e.description for e in change.events]
    assert "detected fault type NvidiaGPUUnhealthy" in text and "Xid 79" in text and text.endswith(
        "Repair action: Replace.")


def test_health_agent_fault_under_node_recovery_none_is_a_label_said_once() -> None:
    req = SlurmRequest("Replace", "NvidiaGPUUnhealthy", "GPU 0: Xid 79")
    manual = _cluster(recovery=NodeRecovery.NONE)
    (change,) = plan_health(HealthReport(alive=ALL_ALIVE, requests={"i-2": req}), manual, NODES, frozenset(),
                            frozenset()).changes
    assert change.set_data == {"fault_labelled": "NvidiaGPUUnhealthy"}  # no op: nothing is replaced
    assert "NodeRecovery is None" in change.events[0].description
    labelled = tuple(replace(n, data={"fault_labelled": "NvidiaGPUUnhealthy"}) if n.instance_id == "i-2" else n
                     for n in NODES)
    again = plan_health(HealthReport(alive=ALL_ALIVE, requests={"i-2": req}), manual, labelled, frozenset(),
                        frozenset())
    assert again.changes == ()
    # an operator's own Action:Replace still replaces under None
    (op,) = plan_health(HealthReport(alive=ALL_ALIVE, requests={"i-2": SlurmRequest("Replace")}), manual, NODES,
                        frozenset(), frozenset()).changes
    assert op.set_data == {"op": "replace"}


def test_controller_down_and_back_notify() -> None:
    down = _plan(HealthReport(alive={**ALL_ALIVE, "i-0": False}))
    (change,) = down.changes
    assert change.set_data == {"controller_down": True, "op": "reboot"}
    assert [n.kind.value for n in change.notifications] == ["ControllerDown"]
    assert "backup controller ip-1 takes over" in change.notifications[0].description
    back_nodes = (replace(NODES[0], data={"controller_down": True}), *NODES[1:])
    (up,) = _plan(HealthReport(alive=ALL_ALIVE), nodes=back_nodes).changes
    assert up.drop_data == ("controller_down",) and up.notifications[0].kind.value == "ControllerUp"


def test_only_in_service_clusters_get_node_decisions() -> None:
    plan = _plan(HealthReport(alive={**ALL_ALIVE, "i-2": False}), cluster=_cluster(ClusterStatus.UPDATING))
    assert plan.changes == ()


def test_leaks_need_two_sightings_and_spare_service_hosts() -> None:
    report = HealthReport(alive={**ALL_ALIVE, "i-stray": True, "i-acct": True}, service_ids=frozenset({"i-acct"}))
    first = _plan(report)
    assert first.leaks == () and first.leak_suspects == {"i-stray"}
    second = _plan(report, leak_suspects=first.leak_suspects)
    assert second.leaks == ("i-stray",) and any("leaked" in e.description for e in second.events)
    gone = _plan(HealthReport(alive=ALL_ALIVE), leak_suspects=first.leak_suspects)
    assert gone.leaks == () and gone.leak_suspects == frozenset()
