"""The pure heart of the reconciler: given what the store says and what is in flight, decide what to do.

``plan`` reads nothing but its arguments and returns a list of actions; ``loop.py`` applies them. Every
pass starts from scratch (level-triggered), so a restarted server simply plans again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from slurmpod.domain import deep_health as dh
from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord, GroupState, NodeRecord
from slurmpod.domain.spec import ClusterSpec
from slurmpod.domain.status import ClusterStatus, EventLevel, InstanceGroupStatus, InstanceStatus, NodeType
from slurmpod.domain.validation import effective_min_count
from slurmpod.reconciler.rolling import RollingAction, plan_scheduled_updates, plan_software_update


@dataclass(frozen=True)
class Takeover:
    """What a successor inherits from the node it replaces: its address (so its hostname ip-A-B-C-D and its Slurm
    NodeName) and, for a controller, its SlurmctldHost slot."""

    address: str
    predecessor: str  # the replaced instance's id
    hostname: str | None = None
    ctl_slot: int | None = None  # controllers only


@dataclass(frozen=True)
class CreateNodes:
    group: str
    count: int
    #: departing nodes whose successors take over their address (and slot): the first ``len(takeover)`` new nodes
    takeover: tuple[Takeover, ...] = ()


@dataclass(frozen=True)
class BootNode:
    instance_id: str


@dataclass(frozen=True)
class RemoveNode:
    instance_id: str
    reason: str
    #: a successor replaces it (a failed node under NodeRecovery): it takes over the node's address and name
    replaced: bool = False


@dataclass(frozen=True)
class InterruptNode:
    """A booting node of a cluster that releases every node (``releasing``): its running commands end now (a
    lifecycle script would otherwise hold the node, and the deletion, for up to its timeout)."""

    instance_id: str


@dataclass(frozen=True)
class ApplyTopology:
    digest: str


@dataclass(frozen=True)
class SetStatus:
    status: ClusterStatus
    failure_message: str | None = None
    spec: ClusterSpec | None = None  # replace the desired spec (rollback to the last good one)
    mark_good: bool = False  # the current spec becomes the last InService spec
    events: tuple[ev.EventDraft, ...] = ()


@dataclass(frozen=True)
class FinishDelete:
    pass


@dataclass(frozen=True)
class NodeOp:
    """Reboot (same root volume) or refresh (fresh root volume, same image) a node marked ``data.op``
    (``op == "replace"`` is not a NodeOp: the node is removed and a successor takes over its address)."""

    instance_id: str


@dataclass(frozen=True)
class DeepHealthCheckGroup:
    """Start or finish the deep health checks of a group's nodes that carry a request (``domain.deep_health``)."""

    group: str


@dataclass(frozen=True)
class UpdateGroups:
    """Continuous mode: new group states (and, for a MinCount rollback, a new desired spec)."""

    group_states: Mapping[str, GroupState]
    spec: ClusterSpec | None = None
    events: tuple[ev.EventDraft, ...] = ()


Action = (CreateNodes | BootNode | RemoveNode | InterruptNode | ApplyTopology | SetStatus | FinishDelete
          | UpdateGroups | NodeOp | DeepHealthCheckGroup | RollingAction)

DEFAULT_MIN_COUNT_TIMEOUT = 3 * 3600.0

MAX_ROLLBACK_RELAUNCHES = 3


@dataclass(frozen=True)
class Observation:
    cluster: ClusterRecord
    nodes: tuple[NodeRecord, ...]
    busy: frozenset[str]  # instance ids (and "topology") with work in flight
    now: float
    desired_topology: str  # digest of the slurm.conf the current spec needs
    min_count_timeout: float = DEFAULT_MIN_COUNT_TIMEOUT

    def node(self, instance_id: str) -> NodeRecord | None:
        """The observed node by id (an index built on first use: appliers look nodes up per action)."""
        index = self.__dict__.get("_by_id")
        if index is None:
            index = {n.instance_id: n for n in self.nodes}
            object.__setattr__(self, "_by_id", index)
        return index.get(instance_id)


def may_start_daemons(cluster: ClusterRecord, group: str, nodes: Sequence[NodeRecord], desired_topology: str) -> bool:
    """Whether a node may enter its ``daemons`` phase: controllers always; other nodes once a controller runs
    and slurm.conf has the current topology. (Launch, baseline and OnCreate run earlier, in parallel.)"""
    ctl_groups = {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}
    if group in ctl_groups:
        # every controller must have its address first: slurm.conf lists them all (SlurmctldHost order)
        return all("launched" in n.phases for n in nodes if n.group in ctl_groups and n.active)
    return _controllers_ready(cluster.spec, nodes) and cluster.applied_topology == desired_topology


def may_start_baseline(cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> bool:
    """Whether a node may write its baseline (resource_config.json, which lifecycle scripts read to find the
    controller): once every active controller has launched (has its address). Legacy clusters have no roles."""
    ctl_groups = {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}
    return all("launched" in n.phases for n in nodes if n.group in ctl_groups and n.active)


def controller_groups(spec: ClusterSpec) -> list[str]:
    """Names of the Controller groups (the only rows ``may_start_daemons`` looks at)."""
    return [g.name for g in spec.groups_of(NodeType.CONTROLLER)]


def _controllers_ready(spec: ClusterSpec, nodes: Sequence[NodeRecord]) -> bool:
    """Whether non-controller nodes may start their daemons: a controller is Running, or has joined (slurmctld
    answers, the controller list is refreshed) and only its OnInitComplete script is left. Legacy clusters have
    no roles."""
    ctl_groups = {g.name for g in spec.groups_of(NodeType.CONTROLLER)}
    if not ctl_groups:
        return True
    return any(n.group in ctl_groups and (n.status == InstanceStatus.RUNNING or
                                          (n.status == InstanceStatus.PENDING and "joined" in n.phases))
               for n in nodes)


def controller_slot(node: NodeRecord) -> int:
    """A controller's place in SlurmctldHost order: launch order, or the slot of the controller it replaced."""
    slot = node.data.get("ctl_slot")
    return int(slot) if isinstance(slot, int) else node.seq


def replaced_by_successor(node: NodeRecord, is_controller: bool) -> bool:
    """Whether a departing node's successor takes over its address (hostname, Slurm NodeName): every departing
    controller (clients keep working); another node only when it is replaced (BatchReplace, Slurm's
    ``Action:Replace``, NodeRecovery), not when its group shrinks or it is deleted."""
    return not node.active and bool(node.ip) and (is_controller or bool(node.data.get("replaced")))


def takeovers(group: str, is_controller: bool, nodes: Sequence[NodeRecord]) -> tuple[Takeover, ...]:
    """The addresses of ``group``'s replaced nodes that no node of the group holds or claims yet, oldest first."""
    mine = [n for n in nodes if n.group == group and n.active]
    claimed = {n.ip for n in mine} | {n.data.get("address") for n in mine}
    out: dict[str, Takeover] = {}
    for n in sorted(nodes, key=lambda n: n.seq):
        if n.group != group or not replaced_by_successor(n, is_controller) or not n.ip or n.ip in claimed:
            continue
        out.setdefault(n.ip, Takeover(n.ip, n.instance_id, n.hostname,
                                      controller_slot(n) if is_controller else None))
    return tuple(out.values())


def _removal_order(nodes: Sequence[NodeRecord]) -> list[NodeRecord]:
    """Unhealthy (not Running) first, then the newest."""
    return sorted(nodes, key=lambda n: (n.status == InstanceStatus.RUNNING, -n.seq))


def _converge(obs: Observation, spec: ClusterSpec) -> tuple[list[Action], bool]:
    """Actions that move the nodes toward ``spec``; also whether everything already matches it."""
    actions: list[Action] = []
    nodes = [n for n in obs.nodes if n.active]
    converged = True
    wanted = {g.name: g for g in spec.instance_groups}
    for n in nodes:
        if n.group not in wanted:
            actions.append(RemoveNode(n.instance_id, "instance group deleted"))
            converged = False
    ctl_ready = _controllers_ready(spec, obs.nodes)
    topology_ok = obs.cluster.applied_topology == obs.desired_topology
    ctl_groups = {g.name for g in spec.groups_of(NodeType.CONTROLLER)}
    if ctl_ready and not topology_ok and "topology" not in obs.busy:
        actions.append(ApplyTopology(obs.desired_topology))
    for g in spec.instance_groups:
        mine = [n for n in nodes if n.group == g.name]
        is_ctl = g.name in ctl_groups
        if len(mine) < g.instance_count:
            # a replaced node's address (hostname, NodeName) and a controller's slot go to its successor
            actions.append(CreateNodes(g.name, g.instance_count - len(mine), takeovers(g.name, is_ctl, obs.nodes)))
        if len(mine) > g.instance_count:
            for n in _removal_order(mine)[: len(mine) - g.instance_count]:
                actions.append(RemoveNode(n.instance_id, f"instance group {g.name} scaled down"))
        if len(mine) != g.instance_count:
            converged = False
        queued = sorted((n for n in mine if n.data.get("replace_queued")), key=lambda n: n.seq)
        if queued:
            converged = False
            settled = len(mine) == g.instance_count and all(
                n.status == InstanceStatus.RUNNING and n.instance_id not in obs.busy for n in mine)
            if settled:  # one queued controller replacement at a time, once every controller runs again
                actions.append(RemoveNode(queued[0].instance_id, "Replaced by request"))
        for n in mine:
            if n.data.get("replace_queued"):
                continue
            if n.data.get("op") == "replace" and n.instance_id not in obs.busy:
                # Slurm's Action:Replace: a new instance takes over the node's address, hostname and NodeName
                actions.append(RemoveNode(n.instance_id, "Replaced (Slurm Action:Replace)", replaced=True))
                converged = False
                continue
            if n.data.get("op") and n.instance_id not in obs.busy:
                actions.append(NodeOp(n.instance_id))
                continue
            if n.status == InstanceStatus.PENDING:
                converged = False
                # before the controller is up, a node may still launch and run baseline + OnCreate
                may_boot = is_ctl or (ctl_ready and topology_ok) or "on_create" not in n.phases
                if n.data.get("address") and any(o.ip == n.data["address"] and o.instance_id != n.instance_id
                                                  and not o.data.get("terminated") for o in obs.nodes):
                    may_boot = False  # its predecessor still holds the address it takes over
                if may_boot and n.instance_id not in obs.busy and n.next_attempt <= obs.now:
                    actions.append(BootNode(n.instance_id))
            elif n.status != InstanceStatus.RUNNING:
                converged = False
    for group, due in dh.due(nodes).items():
        if dh.worker_key(group) not in obs.busy and any(n.instance_id not in obs.busy for n in due):
            actions.append(DeepHealthCheckGroup(group))
    for n in obs.nodes:
        if not n.active:
            converged = False
            if n.instance_id not in obs.busy:
                actions.append(RemoveNode(n.instance_id, n.message or "removal in progress"))
    if not topology_ok and any(g.node_type is not None for g in spec.instance_groups):
        converged = False
    return actions, converged


def _failure_text(failed: Sequence[NodeRecord]) -> str:
    parts = [f"Instance {n.instance_id} in instance group {n.group} failed: {n.message or 'unknown cause'}"
             for n in failed]
    return "; ".join(parts)


def _running(group: str, nodes: Sequence[NodeRecord]) -> int:
    return sum(1 for n in nodes if n.group == group and n.status == InstanceStatus.RUNNING)


def _plan_continuous(obs: Observation) -> list[Action]:
    """Desired-state provisioning: never fails for missing workers; groups track MinCount on their own."""
    c = obs.cluster
    spec = c.spec
    actions, _ = _converge(obs, spec)
    for n in obs.nodes:  # a node that cannot be healed is replaced
        if n.active and n.status == InstanceStatus.FAILURE and n.instance_id not in obs.busy:
            actions.append(RemoveNode(n.instance_id, n.message or "failed", replaced=True))
    if c.status == ClusterStatus.CREATING:
        ctl = [g.name for g in spec.groups_of(NodeType.CONTROLLER)]
        login = [g.name for g in spec.groups_of(NodeType.LOGIN)]
        if all(_running(g, obs.nodes) >= 1 for g in ctl + login):
            actions.append(SetStatus(ClusterStatus.IN_SERVICE, None, mark_good=True,
                                     events=(ev.cluster_event(c.name, "creation", "completed"),)))
    states = dict(c.group_states)
    new_spec = spec
    drafts: list[ev.EventDraft] = []
    for g in spec.instance_groups:
        st = states.get(g.name)
        if st is None or st.status == InstanceGroupStatus.IN_SERVICE:
            continue
        minimum = effective_min_count(g, True)
        if _running(g.name, obs.nodes) >= minimum:
            states[g.name] = GroupState(InstanceGroupStatus.IN_SERVICE, obs.now, g.instance_count, minimum)
            drafts.append(ev.min_capacity_reached(c.name, g.name, _running(g.name, obs.nodes), g.instance_count,
                                                  minimum))
        elif obs.now - st.since >= obs.min_count_timeout:
            count, mn = st.good_count or 0, st.good_min or 0
            msg = (f"MinCount {minimum} was not reached within {int(obs.min_count_timeout)} s "
                   f"({_running(g.name, obs.nodes)} of {g.instance_count} running)")
            new_spec = new_spec.with_groups(tuple(
                replace(x, instance_count=count, min_instance_count=mn) if x.name == g.name else x
                for x in new_spec.instance_groups))
            states[g.name] = GroupState(InstanceGroupStatus.IN_SERVICE, obs.now, count, mn)
            drafts.append(ev.min_count_rollback(c.name, g.name, count, g.instance_count, minimum, mn, msg))
    if drafts:
        actions.append(UpdateGroups(states, new_spec if new_spec is not spec else None, tuple(drafts)))
    return actions


def releasing(cluster: ClusterRecord) -> bool:
    """Whether the cluster releases every node (deleted, or its creation failed): no boot is worth finishing."""
    return cluster.status == ClusterStatus.DELETING or (
        cluster.status == ClusterStatus.ROLLING_BACK and cluster.last_good_spec is None)


def _interrupt_boots(obs: Observation) -> list[Action]:
    """Booting nodes (Pending, with work in flight) of a releasing cluster: ``InterruptNode``."""
    return [InterruptNode(n.instance_id) for n in obs.nodes
            if n.instance_id in obs.busy and n.status == InstanceStatus.PENDING]


def plan(obs: Observation) -> list[Action]:
    c = obs.cluster
    st = c.status
    scheduled = plan_scheduled_updates(c, obs.now)
    if scheduled:
        return list(scheduled)
    if c.spec.continuous and st in (ClusterStatus.CREATING, ClusterStatus.IN_SERVICE):
        return _plan_continuous(obs)
    if st == ClusterStatus.SYSTEM_UPDATING:
        return list(plan_software_update(c, obs.nodes, obs.busy, obs.now))
    if st == ClusterStatus.DELETING:
        # controllers go last: the other nodes leave Slurm through them (their jobs ended and recorded), which
        # with a controller already gone waits for Slurm's timeouts (30 s and more for several head nodes)
        ctl_groups = set(controller_groups(c.spec))
        leaving = [n for n in obs.nodes if n.active or n.status == InstanceStatus.SHUTTING_DOWN]
        others = any(n.group not in ctl_groups for n in leaving)
        actions: list[Action] = [
            RemoveNode(n.instance_id, "cluster deleted")
            for n in leaving
            if n.instance_id not in obs.busy and not (others and n.group in ctl_groups)
        ]
        actions += _interrupt_boots(obs)
        if not obs.nodes and not obs.busy:
            actions.append(FinishDelete())
        return actions
    if st == ClusterStatus.FAILED:
        return []
    if st == ClusterStatus.ROLLING_BACK and c.last_good_spec is None:
        # A failed creation: release every instance, then Failed.
        actions = [RemoveNode(n.instance_id, "cluster creation rolled back") for n in obs.nodes
                   if n.instance_id not in obs.busy]
        actions += _interrupt_boots(obs)
        if not obs.nodes and not obs.busy:
            actions.append(SetStatus(ClusterStatus.FAILED, c.failure_message, events=(
                ev.cluster_event(c.name, "creation", "failed", level=EventLevel.ERROR, failure=c.failure_message),
            )))
        return actions

    failed = [n for n in obs.nodes if n.active and n.status == InstanceStatus.FAILURE]
    if failed and st == ClusterStatus.CREATING:
        msg = _failure_text(failed)
        return [SetStatus(ClusterStatus.ROLLING_BACK, msg, events=(
            ev.cluster_event(c.name, "creation", "failed", level=EventLevel.ERROR, failure=msg),
        ))]
    if failed and st == ClusterStatus.UPDATING and c.last_good_spec is not None:
        msg = _failure_text(failed)
        return [SetStatus(ClusterStatus.ROLLING_BACK, msg, spec=c.last_good_spec, events=(
            ev.cluster_event(c.name, "update", "failed", level=EventLevel.ERROR, failure=msg),
        ))]

    actions, converged = _converge(obs, c.spec)
    if failed:
        # Rolling back an update, or a node that died while InService: replace it (bounded while rolling back).
        automatic = c.spec.automatic_recovery
        for n in failed:
            if st == ClusterStatus.ROLLING_BACK and n.attempts >= MAX_ROLLBACK_RELAUNCHES:
                continue
            if st == ClusterStatus.IN_SERVICE and not automatic:
                continue  # NodeRecovery None: the operator decides (the group shows Degraded)
            actions.append(RemoveNode(n.instance_id, n.message or "failed", replaced=True))
        converged = False
    if converged and st == ClusterStatus.CREATING:
        actions.append(SetStatus(ClusterStatus.IN_SERVICE, None, mark_good=True,
                                 events=(ev.cluster_event(c.name, "creation", "completed"),)))
    elif converged and st == ClusterStatus.UPDATING:
        actions.append(SetStatus(ClusterStatus.IN_SERVICE, None, mark_good=True,
                                 events=(ev.cluster_event(c.name, "update", "completed"),)))
    elif converged and st == ClusterStatus.ROLLING_BACK:
        actions.append(SetStatus(ClusterStatus.IN_SERVICE, c.failure_message, mark_good=True, events=(
            ev.cluster_event(c.name, "update rollback", "completed", level=EventLevel.WARN,
                             failure=c.failure_message),
        )))
    return actions
