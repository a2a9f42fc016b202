"""What the console pages show, read through the API's own operations (``api.app.dispatch``).

Every value on a page comes from the same handlers, validation and account scoping the API uses
(DescribeCluster, ListClusters, ListClusterNodes, ListClusterEvents); only the image release, which the
wire shapes do not carry, is read from the service's node records of the same (already resolved) cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from slurmpod.api.app import ApiContext, dispatch
from slurmpod.errors import ServiceError
from slurmpod.service.clusters import Caller

MAX_NODES = 2000  # a page lists at most this many nodes (pages of 100 from ListClusterNodes)
EVENTS_SHOWN = 50
ACTIONABLE = ("Running", "Failure")  # node statuses that accept reboot / replace


def when(value: Any) -> str:
    """An API timestamp (epoch seconds or datetime) as ``2025-06-01 12:00:00 UTC``; ``—`` when absent."""
    if value is None:
        return "—"
    if isinstance(value, datetime):
        moment = value.astimezone(UTC)
    else:
        moment = datetime.fromtimestamp(float(value), UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class ClusterRow:
    name: str
    status: str
    created: str
    arn: str


def image_phrase(image_status: str) -> str:
    """How the update form words a group's ImageVersionStatus."""
    return "update available" if image_status == "UpdateAvailable" else "up to date"


@dataclass(frozen=True)
class GroupRow:
    name: str
    instance_type: str
    node_type: str
    partitions: str
    target: int
    current: int
    min: int
    status: str
    image_status: str
    software_update_status: str
    schedule: str


@dataclass(frozen=True)
class NodeRow:
    instance_id: str
    group: str
    hostname: str
    status: str
    message: str
    image_release: str
    image_status: str
    last_software_update: str
    launched: str

    @property
    def actionable(self) -> bool:
        return self.status in ACTIONABLE


@dataclass(frozen=True)
class EventRow:
    time: str
    level: str
    resource: str
    description: str


@dataclass
class ClusterPage:
    name: str
    arn: str
    status: str
    failure_message: str
    continuous: bool
    groups: list[GroupRow] = field(default_factory=list)
    nodes: list[NodeRow] = field(default_factory=list)
    events: list[EventRow] = field(default_factory=list)
    events_note: str = ""
    nodes_truncated: bool = False

    @property
    def update_available(self) -> list[str]:
        return [g.name for g in self.groups if g.image_status == "UpdateAvailable"]

    @property
    def updating(self) -> bool:
        return self.status == "SystemUpdating"


def list_clusters(ctx: ApiContext, caller: Caller) -> list[ClusterRow]:
    rows: list[ClusterRow] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"MaxResults": 100, "SortBy": "NAME", "SortOrder": "Ascending"}
        if token:
            params["NextToken"] = token
        out = dispatch(ctx, "ListClusters", params, caller)
        for c in _items(out, "ClusterSummaries"):
            rows.append(ClusterRow(str(c["ClusterName"]), str(c["ClusterStatus"]), when(c.get("CreationTime")),
                                   str(c["ClusterArn"])))
        token = out.get("NextToken")  # type: ignore[assignment]
        if not token:
            return rows


def _items(out: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = out.get(key) or []
    return [v for v in value if isinstance(v, Mapping)]


def _group_row(g: Mapping[str, Any]) -> GroupRow:
    slurm = g.get("SlurmConfig") or {}
    sched = g.get("ScheduledUpdateConfig") or {}
    return GroupRow(
        name=str(g["InstanceGroupName"]),
        instance_type=str(g.get("InstanceType") or "—"),
        node_type=str(slurm.get("NodeType") or "—"),
        partitions=", ".join(slurm.get("PartitionNames") or ()) or "—",
        target=int(g.get("TargetCount") or 0),
        current=int(g.get("CurrentCount") or 0),
        min=int(g.get("MinCount") or 0),
        status=str(g.get("Status") or "—"),
        image_status=str(g.get("ImageVersionStatus") or "—"),
        software_update_status=str(g.get("SoftwareUpdateStatus") or "—"),
        schedule=str(sched.get("ScheduleExpression") or "—"),
    )


def _nodes(ctx: ApiContext, caller: Caller, name: str) -> tuple[list[Mapping[str, Any]], bool]:
    nodes: list[Mapping[str, Any]] = []
    token: str | None = None
    while len(nodes) < MAX_NODES:
        params: dict[str, Any] = {"ClusterName": name, "MaxResults": 100, "SortBy": "NAME",
                                  "SortOrder": "Ascending"}
        if token:
            params["NextToken"] = token
        out = dispatch(ctx, "ListClusterNodes", params, caller)
        nodes.extend(_items(out, "ClusterNodeSummaries"))
        token = out.get("NextToken")  # type: ignore[assignment]
        if not token:
            return nodes, False
    return nodes[:MAX_NODES], True


def _events(ctx: ApiContext, caller: Caller, name: str) -> tuple[list[EventRow], str]:
    try:
        out = dispatch(ctx, "ListClusterEvents", {"ClusterName": name, "MaxResults": EVENTS_SHOWN,
                                                  "SortOrder": "Descending"}, caller)
    except ServiceError as err:  # e.g. strict mode: events only for Continuous clusters, as on HyperPod
        return [], err.message
    rows = []
    for e in _items(out, "Events"):
        where = e.get("InstanceId") or e.get("InstanceGroupName") or e.get("ClusterName") or ""
        rows.append(EventRow(when(e.get("EventTime")), str(e.get("EventLevel") or "Info"),
                             f"{e.get('ResourceType', '')} {where}".strip(), str(e.get("Description") or "")))
    return rows, ""


def load_cluster(ctx: ApiContext, caller: Caller, name: str) -> ClusterPage:
    """Raises ServiceError (ResourceNotFound for another account's or a missing cluster)."""
    d = dispatch(ctx, "DescribeCluster", {"ClusterName": name}, caller)
    page = ClusterPage(
        name=str(d["ClusterName"]), arn=str(d["ClusterArn"]), status=str(d["ClusterStatus"]),
        failure_message=str(d.get("FailureMessage") or ""),
        continuous=d.get("NodeProvisioningMode") == "Continuous",
        groups=[_group_row(g) for g in _items(d, "InstanceGroups")],
    )
    summaries, page.nodes_truncated = _nodes(ctx, caller, page.name)
    rec = ctx.service.resolve(caller, page.arn)
    releases = {n.instance_id: n.image_release for n in ctx.service.nodes(rec)}
    for n in summaries:
        status = n.get("InstanceStatus") or {}
        page.nodes.append(NodeRow(
            instance_id=str(n["InstanceId"]),
            group=str(n.get("InstanceGroupName") or ""),
            hostname=str(n.get("PrivateDnsHostname") or "—"),
            status=str(status.get("Status") or "—"),
            message=str(status.get("Message") or ""),
            image_release=releases.get(str(n["InstanceId"])) or "—",
            image_status=str(n.get("ImageVersionStatus") or "—"),
            last_software_update=when(n.get("LastSoftwareUpdateTime")),
            launched=when(n.get("LaunchTime")),
        ))
    page.events, page.events_note = _events(ctx, caller, page.name)
    return page
