"""Node operations: reboot (same root volume) or refresh (fresh root volume of the same image) a node marked
``data.op`` (BatchReboot/BatchReplace, NodeRecovery, Slurm's ``Action:Reboot/Replace``), then hand it to the
boot path (Pending, with only the phases that survive the operation)."""

from __future__ import annotations

import logging

from slurmpod.domain import events as ev
from slurmpod.domain.status import InstanceStatus
from slurmpod.domain.transitions import node_to
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.reconciler.work import Context, Park

log = logging.getLogger("slurmpod.reconciler")

#: phases a reboot keeps (the root volume and what the scripts wrote on it survive)
REBOOT_KEEPS = ("launched", "on_create", "on_init_complete")


def node_op(ctx: Context, cluster_id: str, instance_id: str) -> Park | None:
    node = ctx.store.get_node(instance_id)
    cluster = ctx.store.get_cluster(cluster_id)
    if node is None or cluster is None or not node.data.get("op"):
        return None
    op = str(node.data["op"])
    nodes = ctx.store.list_nodes(cluster_id)
    data = {k: v for k, v in node.data.items() if k != "op"}
    try:
        if op == "refresh":
            ctx.runtime.replace_root(cluster, node, nodes, node.image_id or ctx.image_lookup(None)[0])
            keep: tuple[str, ...] = ("launched",)
        else:
            ctx.runtime.reboot_node(cluster, node, nodes)
            keep = tuple(ph for ph in node.phases if ph in REBOOT_KEEPS)
    except NodeBootError as exc:
        ctx.save_node(node_to(node, InstanceStatus.FAILURE, message=exc.message, data=data),
                      ev.node_op_failed(cluster.name, node.group, instance_id, op, exc.message))
        return None
    ctx.save_node(node_to(node, InstanceStatus.PENDING, phases=keep, data=data, message=None))
    log.info("node %s (%s): %s done; rejoining", instance_id, node.group, op)
    ctx.wake()
    return None
