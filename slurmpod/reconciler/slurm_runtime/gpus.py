"""Accelerators of compute groups in Slurm (``slurm.gres``): which clusters need GRES, and each node's gres.conf lines
from the device files its host has (the provider made or checked them at launch: ``InstanceRequest.devices``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from slurmpod.domain.catalog import accelerator_devices, instance_type_info
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec
from slurmpod.domain.status import NodeType
from slurmpod.providers.base import CommandRunner, ProviderError
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.slurm import control
from slurmpod.slurm.gres import NODE_GRES_CONF, device_prefix, find_devices, render_node_gres_conf

if TYPE_CHECKING:
    from slurmpod.reconciler.slurm_runtime.runtime import SlurmRuntime


def group_devices(group: InstanceGroupSpec) -> tuple[str, ...]:
    """The accelerator device files a host of the group's instance type has (``/dev/nvidia0`` ...)."""
    return accelerator_devices(instance_type_info(group.instance_type or "ml.t3.medium"))


def gres_types(spec: ClusterSpec) -> tuple[str, ...]:
    """``("gpu",)`` when a compute group has accelerators (slurm.conf's GresTypes), else ``()``."""
    return ("gpu",) if any(group_devices(g) for g in spec.instance_groups
                           if g.node_type in (NodeType.COMPUTE, None)) else ()


def write_node_gres(r: CommandRunner, spec: ClusterSpec, group: InstanceGroupSpec) -> None:
    """The node's own gres.conf lines (``NODE_GRES_CONF``), on every slurmd/slurmctld host of a cluster with GPUs:
    a GPU compute node's from the devices found in it (their number must be the instance type's); others get a
    file without lines (the controller's gres.conf includes it everywhere)."""
    if not gres_types(spec) or group.node_type == NodeType.LOGIN:
        return
    expected = group_devices(group) if group.node_type in (NodeType.COMPUTE, None) else ()
    found: list[str] = []
    if expected:
        found = find_devices(r, device_prefix(expected[0]))
        if len(found) != len(expected):
            raise NodeBootError(
                f"instance type {group.instance_type} has {len(expected)} accelerators but the node has "
                f"{len(found)} {device_prefix(expected[0])}<N> devices ({', '.join(found) or 'none'})")
    info = instance_type_info(group.instance_type or "ml.t3.medium")
    control.write_file(r, NODE_GRES_CONF, render_node_gres_conf(info.gpu_type if expected else None, found).encode())


def ensure_node_gres_files(rt: SlurmRuntime, cluster: ClusterRecord, nodes: Sequence[NodeRecord]) -> None:
    """After a topology change that brought GresTypes: running nodes booted without GPU groups in the cluster get
    their (empty) node file, so a later slurmd restart can read the controller's gres.conf."""
    if not gres_types(cluster.spec):
        return
    for n in nodes:
        group = cluster.spec.group(n.group)
        if group is None or not n.active or "baseline" not in n.phases or group.node_type == NodeType.LOGIN:
            continue
        r = rt.runner(cluster, n)
        try:
            if r.run(["test", "-e", NODE_GRES_CONF], timeout=10).returncode != 0:
                write_node_gres(r, cluster.spec, group)
        except (ProviderError, control.SlurmError, NodeBootError):
            continue  # an unreachable node boots again through baseline
