"""Legacy topology (pure): HyperPod's ``provisioning_parameters.json`` read into SlurmConfig roles.

A cluster created without ``SlurmConfig`` takes its controller, login and worker groups from the
``provisioning_parameters.json`` in its lifecycle source. slurmpod stores the derived roles in the spec
(``topology_source = provisioning_parameters``) so the reconciler treats both kinds alike; the API keeps
showing such a cluster as legacy (no SlurmConfig) until ``slurmpod migrate`` converts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from slurmpod.domain.spec import ClusterSpec, SlurmConfig
from slurmpod.domain.status import NodeType

API = "api"
PROVISIONING_PARAMETERS = "provisioning_parameters"
PP_FILE = "provisioning_parameters.json"
BOTH_MESSAGE = (
    "The LifeCycleConfig cannot include both a SLURM Orchestrator Config and a provisioning_parameters.json "
    "file simultaneously."
)


def is_api_driven(spec: ClusterSpec) -> bool:
    return any(g.slurm_config is not None for g in spec.instance_groups)


def apply_provisioning_parameters(spec: ClusterSpec, pp: Mapping[str, Any]) -> tuple[ClusterSpec, list[str]]:
    """Fills every group's SlurmConfig from ``provisioning_parameters.json``; returns findings on bad input."""
    findings: list[str] = []
    names = {g.name for g in spec.instance_groups}
    controller = pp.get("controller_group")
    login = pp.get("login_group")
    workers: dict[str, str | None] = {}
    raw_workers = pp.get("worker_groups") or []
    if not isinstance(controller, str) or not controller:
        findings.append(f"{PP_FILE}: controller_group is required.")
    elif controller not in names:
        findings.append(f"{PP_FILE}: controller_group {controller} is not an instance group of the cluster.")
    if login is not None and (not isinstance(login, str) or login not in names):
        findings.append(f"{PP_FILE}: login_group {login} is not an instance group of the cluster.")
    if not isinstance(raw_workers, list):
        findings.append(f"{PP_FILE}: worker_groups must be a list.")
        raw_workers = []
    for w in raw_workers:
        if not isinstance(w, Mapping) or not isinstance(w.get("instance_group_name"), str):
            findings.append(f"{PP_FILE}: each worker_groups entry needs instance_group_name.")
            continue
        name = w["instance_group_name"]
        if name not in names:
            findings.append(f"{PP_FILE}: worker group {name} is not an instance group of the cluster.")
        part = w.get("partition_name")
        workers[name] = part if isinstance(part, str) and part and part != "dev" else None
    if findings:
        return spec, findings
    groups = []
    for g in spec.instance_groups:
        if g.name == controller:
            sc = SlurmConfig(NodeType.CONTROLLER)
        elif g.name == login:
            sc = SlurmConfig(NodeType.LOGIN)
        else:  # workers; a group the file does not name is a worker in `dev` only
            part = workers.get(g.name)
            sc = SlurmConfig(NodeType.COMPUTE, (part,) if part else ())
        groups.append(replace(g, slurm_config=sc))
    return replace(spec, instance_groups=tuple(groups), topology_source=PROVISIONING_PARAMETERS), []
