"""Health decisions (pure): what an observation of a cluster's instances and Slurm means for its nodes.

``observe`` (``reconciler/monitor.py``) gathers a ``HealthReport`` off the loop thread; ``plan_health`` turns it
into ``NodeChange`` values and leaked instances to terminate; the monitor writes each change version-checked on
the node record the plan saw (a node that changed meanwhile is left for the next observation).

Rules: a dead instance is rebooted (NodeRecovery Automatic) or left Failed (None); a slurmd gone for two
observations in a row counts as dead; Slurm's ``Action:Replace``/``Action:Reboot`` reasons (exact, case-sensitive,
as HyperPod; on a FAIL node once its jobs end, on a DOWN one at once) become a replacement (a new instance with the
same hostname, address and NodeName) / a reboot — those the node's health agent set only under NodeRecovery
Automatic (with None they stay as labels, one event says so); a
controller going down or coming back is an event and a notification; an instance the provider runs that no record
owns (seen twice in a row) is a leak and is terminated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType


@dataclass(frozen=True)
class SlurmRequest:
    """A node marked for repair in Slurm (``scontrol update node=X state=fail reason="Action:Replace"``), by an
    operator or by the node's health agent (then ``fault`` is its fault type and ``detail`` what it saw)."""

    action: str  # Replace | Reboot
    fault: str = ""
    detail: str = ""


@dataclass(frozen=True)
class HealthReport:
    alive: Mapping[str, bool]  # every instance the provider knows for the cluster -> its processes run
    service_ids: frozenset[str] = frozenset()  # provider instances that are cluster services (accounting host)
    unreachable: frozenset[str] = frozenset()  # Running nodes whose slurmd is gone
    requests: Mapping[str, SlurmRequest] = field(default_factory=dict)  # instance id -> what Slurm asks
    services: tuple[tuple[bool, str], ...] = ()  # cluster services restored (True) or not (False)


@dataclass(frozen=True)
class NodeChange:
    """One version-checked write of ``instance_id`` as observed at ``version``."""

    instance_id: str
    version: int
    set_data: Mapping[str, object] = field(default_factory=dict)
    drop_data: tuple[str, ...] = ()
    fail_message: str | None = None  # set: the node becomes Failure
    events: tuple[ev.EventDraft, ...] = ()
    notifications: tuple[ev.Notification, ...] = ()
    fault: tuple[str, str] | None = None  # (fault type, action) a health agent reported: counted once written


@dataclass(frozen=True)
class HealthPlan:
    changes: tuple[NodeChange, ...] = ()
    leaks: tuple[str, ...] = ()  # instance ids to terminate
    events: tuple[ev.EventDraft, ...] = ()  # cluster-level
    suspects: frozenset[str] = frozenset()  # unreachable once: dead if unreachable again next time
    leak_suspects: frozenset[str] = frozenset()


def _controller_change(cluster: ClusterRecord, node: NodeRecord, ctls: Sequence[NodeRecord], up: bool
                       ) -> tuple[ev.EventDraft, ev.Notification]:
    host = node.hostname or node.instance_id
    if up:
        primary = bool(ctls) and ctls[0].instance_id == node.instance_id
        return ev.controller_up(cluster.name, node.group, node.instance_id, host, primary=primary)
    others = [n for n in ctls if n.instance_id != node.instance_id and n.status == InstanceStatus.RUNNING]
    return ev.controller_down(cluster.name, node.group, node.instance_id, host,
                              backup=others[0].hostname if others else None)


def _leaks(report: HealthReport, nodes: Sequence[NodeRecord], leak_suspects: frozenset[str]
           ) -> tuple[tuple[str, ...], frozenset[str]]:
    owned = {n.instance_id for n in nodes}
    stray = frozenset(i for i in report.alive if i not in owned and i not in report.service_ids)
    return tuple(sorted(stray & leak_suspects)), stray - leak_suspects


def plan_health(report: HealthReport, cluster: ClusterRecord, nodes: Sequence[NodeRecord],
                suspects: frozenset[str], busy: frozenset[str], leak_suspects: frozenset[str] = frozenset()
                ) -> HealthPlan:
    leaks, new_leak_suspects = _leaks(report, nodes, leak_suspects)
    events = tuple(ev.service_health(text, restored=ok) for ok, text in report.services)
    events += tuple(ev.instance_leaked(cluster.name, iid) for iid in leaks)
    if cluster.status != ClusterStatus.IN_SERVICE:
        return HealthPlan(leaks=leaks, events=events, leak_suspects=new_leak_suspects)
    alive = dict(report.alive)
    for iid in report.unreachable:
        if iid in suspects:  # slurmd gone twice in a row counts as unhealthy
            alive[iid] = False
    new_suspects = frozenset(report.unreachable) - {i for i, a in alive.items() if not a}
    automatic = cluster.spec.automatic_recovery
    ctl_groups = {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}
    ctls = sorted((n for n in nodes if n.group in ctl_groups and n.active), key=lambda n: n.seq)
    changes = []
    for n in nodes:
        iid = n.instance_id
        set_data: dict[str, object] = {}
        drop: list[str] = []
        drafts: list[ev.EventDraft] = []
        notes: list[ev.Notification] = []
        fail: str | None = None
        fault: tuple[str, str] | None = None
        is_ctl = n.group in ctl_groups
        if (is_ctl and n.data.get("controller_down") and n.status == InstanceStatus.RUNNING
                and alive.get(iid)):
            draft, note = _controller_change(cluster, n, ctls, up=True)
            drop.append("controller_down")
            drafts.append(draft)
            notes.append(note)
        if n.status == InstanceStatus.RUNNING and iid not in busy and not n.data.get("op"):
            if alive.get(iid) is False:
                if is_ctl and not n.data.get("controller_down"):
                    draft, note = _controller_change(cluster, n, ctls, up=False)
                    set_data["controller_down"] = True
                    drafts.append(draft)
                    notes.append(note)
                if automatic:
                    set_data["op"] = "reboot"
                else:
                    fail = "Instance processes are no longer running"
                drafts.append(ev.instance_unhealthy(n.group, iid, automatic=automatic))
            elif iid in report.requests:
                req = report.requests[iid]
                host = n.hostname or iid
                fault = (req.fault, req.action) if req.fault else None
                if req.fault and not automatic:
                    # NodeRecovery None: the agent's mark stays in Slurm as a label, the operator decides
                    if n.data.get("fault_labelled") == req.fault:
                        fault = None  # said and counted already
                    else:
                        set_data["fault_labelled"] = req.fault
                        drafts.append(ev.health_fault(n.group, iid, host, req.fault, req.detail, req.action,
                                                      automatic=False))
                else:
                    # Replace: a new instance under the same hostname (plan); Reboot: the same instance, resumed
                    set_data.update({"op": "replace"} if req.action == "Replace"
                                    else {"op": "reboot", "resume_on_join": True})
                    drafts.append(ev.health_fault(n.group, iid, host, req.fault, req.detail, req.action,
                                                  automatic=True) if req.fault
                                  else ev.slurm_requested(n.group, iid, req.action))
        if set_data or drop or fail:
            changes.append(NodeChange(iid, n.version, set_data, tuple(drop), fail, tuple(drafts), tuple(notes),
                                      fault))
    return HealthPlan(tuple(changes), leaks, events, new_suspects, new_leak_suspects)
