"""Pure renderers for the files HyperPod lifecycle scripts read.

* ``/opt/ml/config/resource_config.json`` (``RESOURCE_CONFIG_PATH``): the cluster's instance groups and
  instances in HyperPod's format. AWS's sample scripts find their own group by matching
  ``CustomerIpAddress`` against the node's address.
* ``provisioning_parameters.json`` (legacy clusters): which group is controller/login and which
  worker group backs which partition. It lives next to the scripts (their working directory).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RESOURCE_CONFIG_PATH = "/opt/ml/config/resource_config.json"
PROVISIONING_PARAMETERS_NAME = "provisioning_parameters.json"
PROVISIONING_PARAMETERS_VERSION = "1.0.0"


@dataclass(frozen=True)
class ResourceInstance:
    instance_id: str
    ip: str
    instance_name: str | None = None  # default "<group>-<n>" (1-based position in the group)


@dataclass(frozen=True)
class ResourceGroup:
    name: str
    instance_type: str
    instances: tuple[ResourceInstance, ...] = ()


def resource_config(
    groups: Iterable[ResourceGroup],
    *,
    cluster_name: str | None = None,
    cluster_arn: str | None = None,
) -> dict[str, Any]:
    """The resource_config document as a dict (see ``render_resource_config``)."""
    doc: dict[str, Any] = {}
    cluster: dict[str, str] = {}
    if cluster_arn:
        cluster["ClusterArn"] = cluster_arn
    if cluster_name:
        cluster["ClusterName"] = cluster_name
    if cluster:
        doc["ClusterConfig"] = cluster
    doc["InstanceGroups"] = [
        {
            "Name": g.name,
            "InstanceType": g.instance_type,
            "Instances": [
                {
                    "InstanceName": inst.instance_name or f"{g.name}-{n}",
                    "AgentIpAddress": inst.ip,
                    "CustomerIpAddress": inst.ip,
                    "InstanceId": inst.instance_id,
                }
                for n, inst in enumerate(g.instances, start=1)
            ],
        }
        for g in groups
    ]
    return doc


def render_resource_config(
    groups: Iterable[ResourceGroup],
    *,
    cluster_name: str | None = None,
    cluster_arn: str | None = None,
) -> str:
    """HyperPod's resource_config.json text (4-space indented JSON, trailing newline).

    ``ClusterConfig`` ({``ClusterArn``, ``ClusterName``}) appears only when given; each group is
    ``{"Name", "InstanceType", "Instances": [{"InstanceName", "AgentIpAddress", "CustomerIpAddress",
    "InstanceId"}]}`` with both addresses set to the instance's IP.
    """
    return (
        json.dumps(resource_config(groups, cluster_name=cluster_name, cluster_arn=cluster_arn), indent=4)
        + "\n"
    )


def provisioning_parameters(
    controller_group: str,
    login_group: str | None,
    worker_groups: Sequence[tuple[str, str]],
    *,
    fsx_dns_name: str | None = None,
    fsx_mountname: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The provisioning_parameters document as a dict (see ``render_provisioning_parameters``)."""
    doc: dict[str, Any] = {
        "version": PROVISIONING_PARAMETERS_VERSION,
        "workload_manager": "slurm",
        "controller_group": controller_group,
    }
    if login_group:
        doc["login_group"] = login_group
    doc["worker_groups"] = [
        {"instance_group_name": group, "partition_name": partition} for group, partition in worker_groups
    ]
    if fsx_dns_name:
        doc["fsx_dns_name"] = fsx_dns_name
    if fsx_mountname:
        doc["fsx_mountname"] = fsx_mountname
    for key, value in (extra or {}).items():
        doc.setdefault(key, value)
    return doc


def render_provisioning_parameters(
    controller_group: str,
    login_group: str | None,
    worker_groups: Sequence[tuple[str, str]],
    *,
    fsx_dns_name: str | None = None,
    fsx_mountname: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The legacy provisioning_parameters.json text: ``version``, ``workload_manager`` ("slurm"),
    ``controller_group``, ``login_group`` (omitted when None), ``worker_groups``
    ([{``instance_group_name``, ``partition_name``}]), optional ``fsx_dns_name``/``fsx_mountname``;
    ``extra`` adds further keys (e.g. ``slurm_configurations``) without overriding those.
    """
    doc = provisioning_parameters(
        controller_group,
        login_group,
        worker_groups,
        fsx_dns_name=fsx_dns_name,
        fsx_mountname=fsx_mountname,
        extra=extra,
    )
    return json.dumps(doc, indent=4) + "\n"
