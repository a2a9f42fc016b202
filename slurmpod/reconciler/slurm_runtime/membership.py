"""Slurm membership changes: drain and resume, jobs on a node, leaving Slurm, graceful stops, removal, root
volume replacement and reboot. Waits for jobs are the reconciler's (parked work items), never done here."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import ClusterStatus, NodeType
from slurmpod.providers.base import CommandRunner, ProviderError
from slurmpod.reconciler import headnodes
from slurmpod.reconciler.plan import controller_slot
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.slurm import admin, control

if TYPE_CHECKING:
    from slurmpod.reconciler.slurm_runtime.runtime import SlurmRuntime

log = logging.getLogger("slurmpod.runtime")

REMOVED_REASON = control.REASON_PREFIX + "removed"


def slurm_name(cluster: ClusterRecord, node: NodeRecord) -> str | None:
    """The node's Slurm NodeName when it is a compute node (controllers and login nodes are not Slurm nodes)."""
    group = cluster.spec.group(node.group) or (cluster.last_good_spec.group(node.group)
                                               if cluster.last_good_spec else None)
    if group is None or group.node_type not in (NodeType.COMPUTE, None) or not node.hostname:
        return None
    return node.hostname


def _control(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]
             ) -> tuple[str, admin.SlurmControl] | None:
    name = slurm_name(cluster, node)
    primary = rt.primary(cluster, [n for n in nodes if n.instance_id != node.instance_id])
    if name is None or primary is None:
        return None
    return name, admin.SlurmControl(primary)


def drain(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord],
          reason: str) -> bool:
    found = _control(rt, cluster, node, nodes)
    if found is None:
        return False
    name, ctl = found
    sn = ctl.node(name)
    if sn is None:
        return False
    if sn.is_drained() or sn.is_draining():
        return (sn.reason or "").startswith(control.REASON_PREFIX)
    ctl.drain(name, reason)
    return True


def jobs_done(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> bool:
    found = _control(rt, cluster, node, nodes)
    if found is None:
        return True
    name, ctl = found
    try:
        sn = ctl.node(name)
    except (control.SlurmError, ProviderError) as exc:
        log.warning("node %s: cannot read its Slurm state (%s); counting its jobs as running", name, exc)
        return False
    return sn is None or not sn.has_jobs()


def running_jobs(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]
                 ) -> list[str]:
    found = _control(rt, cluster, node, nodes)
    if found is None:
        return []
    name, ctl = found
    try:
        return ctl.jobs_on(name)
    except (control.SlurmError, ProviderError) as exc:
        log.warning("node %s: cannot list its jobs (%s)", name, exc)
        return []


def resume(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
    found = _control(rt, cluster, node, nodes)
    if found is None:
        return
    name, ctl = found
    sn = ctl.node(name)
    # idempotent: after a crash the node may already be resumed (Slurm refuses to resume an idle node)
    if sn is not None and (sn.is_drained() or sn.is_draining() or sn.is_failed() or sn.is_down()):
        ctl.resume(name)


def remove_node(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
    """Takes the node out of Slurm and terminates it. The reconciler waited for its jobs first where it should;
    jobs still on it are ended here (the node is set DOWN: Slurm requeues or fails them at once)."""
    group = cluster.spec.group(node.group) or (cluster.last_good_spec.group(node.group)
                                               if cluster.last_good_spec else None)
    # a controller leaving a cluster that stays hands over first (not when the whole cluster goes away)
    staying = cluster.status not in (ClusterStatus.DELETING, ClusterStatus.ROLLING_BACK)
    if staying and group is not None and group.node_type == NodeType.CONTROLLER and "daemons" in node.phases \
            and rt.alive(cluster).get(node.instance_id, False):
        graceful_stop(rt, cluster, node, nodes)
    if "daemons" in node.phases:
        found = _control(rt, cluster, node, nodes)
        if found is not None:
            try:
                _leave_slurm(rt, cluster, node, *found)
            except (control.SlurmError, ProviderError) as exc:
                log.warning("node %s: leaving Slurm failed (%s); terminating anyway", node.instance_id, exc)
    rt.provider.terminate(cluster.cluster_id, node.instance_id)


def _leave_slurm(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, name: str,
                 ctl: admin.SlurmControl) -> None:
    sn = ctl.node(name)
    if sn is None:
        return
    if sn.has_jobs():
        ctl.down(name, REMOVED_REASON)
    else:
        ctl.drain(name, REMOVED_REASON)
    try:
        control.stop_slurmd(rt.runner(cluster, node), timeout=10)
    except (control.SlurmError, ProviderError):
        pass
    ctl.delete_node(name)


def graceful_stop(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord] = ()
                  ) -> None:
    group = cluster.spec.group(node.group)
    r: CommandRunner = rt.runner(cluster, node)
    try:  # slurmctld saves its state (the job queue) on the shared volume before the node goes down
        if group is not None and group.node_type == NodeType.CONTROLLER:
            try:
                # the stopping controller keeps its place in SlurmctldHost order even when marked for removal
                ctls = sorted({n.instance_id: n for n in [*rt.controllers(cluster, nodes), node]
                               if n.ip}.values(), key=controller_slot)
                headnodes.hand_over(node, ctls, rt.alive(cluster), rt.runner_of(cluster))
            except (control.SlurmError, ProviderError) as exc:  # the stop below still saves the state
                log.warning("controller %s: hand-over failed: %s", node.instance_id, exc)
            with headnodes.refusing_clients(r):
                control.stop_daemon(r, control.SLURMCTLD_PID_FILE, "slurmctld")
        else:
            control.stop_slurmd(r, timeout=20)
    except (control.SlurmError, ProviderError) as exc:
        log.warning("node %s: graceful stop failed: %s", node.instance_id, exc)


def replace_root(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord],
                 image_id: str) -> None:
    req = rt.request(cluster, node, image_id)
    if rt.alive(cluster).get(node.instance_id, False):
        graceful_stop(rt, cluster, node, nodes)
    try:
        rt.provider.replace_root_volume(req)
    except ProviderError as exc:
        raise NodeBootError(f"root volume replacement failed: {exc}") from exc


def reboot_node(rt: SlurmRuntime, cluster: ClusterRecord, node: NodeRecord, nodes: Sequence[NodeRecord]) -> None:
    if rt.alive(cluster).get(node.instance_id, False):
        graceful_stop(rt, cluster, node, nodes)
    try:
        rt.provider.reboot(cluster.cluster_id, node.instance_id)
    except ProviderError as exc:
        raise NodeBootError(f"reboot failed: {exc}") from exc
