"""One small function per operation: parse, call the service, translate, return."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from slurmpod.api import operations
from slurmpod.api import translate as tr
from slurmpod.api.events import describe_cluster_event, list_cluster_events
from slurmpod.api.pagination import decode_token, encode_token, epoch, paginate
from slurmpod.domain.model import ClusterRecord, NodeRecord
from slurmpod.domain.status import ImageVersionStatus
from slurmpod.domain.views import current_count, group_status
from slurmpod.errors import ValidationException, validation_message
from slurmpod.service.clusters import Caller, ClusterService, ImageCatalog

T = TypeVar("T")
Params = Mapping[str, Any]
Handler = Callable[[ClusterService, Caller, Params], dict[str, Any]]

BUILTIN_IMAGE_FALLBACK = "ami-00000000000000000"


def _desired_image(images: ImageCatalog | None, rec: ClusterRecord, group: str) -> str:
    su = rec.software_update
    if su is not None and group in su.groups:
        return su.target_image
    spec = rec.spec.group(group)
    if images is None:
        return (spec.image_id if spec and spec.image_id not in (None, "default") else None) or BUILTIN_IMAGE_FALLBACK
    try:
        return images.resolve(spec.image_id if spec else None).image_id
    except ValueError:
        return images.latest().image_id


def _stale_status(images: ImageCatalog | None, current: str) -> ImageVersionStatus:
    """Why an instance on ``current`` should update: the release's mark (``slurmpod images mark``) or just a
    newer release."""
    image = images.get(current) if images is not None else None
    mark = image.status if image is not None else None
    if mark == ImageVersionStatus.SECURITY_UPDATE_REQUIRED.value:
        return ImageVersionStatus.SECURITY_UPDATE_REQUIRED
    if mark == ImageVersionStatus.END_OF_LIFE.value:
        return ImageVersionStatus.END_OF_LIFE
    return ImageVersionStatus.UPDATE_AVAILABLE


def _version_status(images: ImageCatalog | None, current: str | None, desired: str) -> ImageVersionStatus:
    return ImageVersionStatus.UP_TO_DATE if current in (None, desired) else _stale_status(images, current)


def _group_image(catalog: ImageCatalog | None, rec: ClusterRecord, group: str, nodes: list[NodeRecord]
                 ) -> tr.ImageView:
    desired = _desired_image(catalog, rec, group)
    images = [n.image_id for n in nodes if n.group == group and n.active and n.image_id]
    stale = [i for i in images if i != desired]
    current = (stale[0] if stale else desired) if images else desired
    su = rec.software_update
    return tr.ImageView(
        current=current,
        desired=desired,
        status=_stale_status(catalog, stale[0]) if stale else ImageVersionStatus.UP_TO_DATE,
        software_update_status=rec.software_update_status.get(group),
        active_update=su.deployment if su is not None and group in su.groups else None,
    )


def _slurm_group_check(p: Params) -> None:
    findings = tr.slurm_group_findings(p.get("InstanceGroups"))
    if findings:
        raise ValidationException(validation_message(findings))


def create_cluster(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    _slurm_group_check(p)
    rec = svc.create(caller, tr.spec_from_create(p))
    return {"ClusterArn": rec.arn}


def update_cluster(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    _slurm_group_check(p)
    cur = svc.resolve(caller, p["ClusterName"])
    requested, orchestrator_given = tr.spec_from_update(p, cur.spec)
    rec = svc.update(
        caller, p["ClusterName"], requested, tuple(p.get("InstanceGroupsToDelete") or ()),
        orchestrator_given=orchestrator_given,
    )
    return {"ClusterArn": rec.arn}


def describe_cluster(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    # the record, group/status/image per node (one GROUP BY, not every row) and the image catalogue, read together
    rec, nodes, images = svc.describe_view(caller, p["ClusterName"])
    legacy = rec.spec.topology_source != "api"  # roles derived from provisioning_parameters.json: not shown
    groups = [
        tr.group_details(rec, replace(g, slurm_config=None) if legacy else g, group_status(rec, g, nodes),
                         current_count(g.name, nodes), _group_image(images, rec, g.name, nodes))
        for g in rec.spec.instance_groups
    ]
    return tr.describe_cluster(rec, groups)


def delete_cluster(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    rec = svc.delete(caller, p["ClusterName"])
    return {"ClusterArn": rec.arn}


def list_clusters(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    after, before, contains = p.get("CreationTimeAfter"), p.get("CreationTimeBefore"), p.get("NameContains")
    filters = {k: p.get(k) for k in ("CreationTimeAfter", "CreationTimeBefore", "NameContains", "SortBy", "SortOrder")}
    by_name = p.get("SortBy") == "NAME"
    if not contains:  # the common case pages in SQL; a substring filter keeps the exact in-Python path below
        token = p.get("NextToken")
        limit = p.get("MaxResults") or 100
        rows = svc.cluster_summary_page(
            caller, by_name=by_name, descending=p.get("SortOrder", "Descending") == "Descending",
            after=_token_key(token, filters, _CLUSTER_KEY[by_name]) if token else None, limit=limit + 1,
            created_after=epoch(after) if after is not None else None,
            created_before=epoch(before) if before is not None else None)
        summaries, next_token = _cut(rows, limit, filters, (lambda c: (c.name, c.cluster_id)) if by_name
                                     else (lambda c: (c.creation_time, c.cluster_id)))
        out: dict[str, Any] = {"ClusterSummaries": [tr.cluster_summary(c) for c in summaries]}
        if next_token:
            out["NextToken"] = next_token
        return out
    items = svc.cluster_summaries(caller)
    if after is not None:
        items = [c for c in items if c.creation_time > epoch(after)]
    if before is not None:
        items = [c for c in items if c.creation_time < epoch(before)]
    items = [c for c in items if contains in c.name]
    page, token = paginate(
        items,
        (lambda c: (c.name, c.cluster_id)) if by_name else (lambda c: (c.creation_time, c.cluster_id)),
        descending=p.get("SortOrder", "Descending") == "Descending",
        max_results=p.get("MaxResults"),
        next_token=p.get("NextToken"),
        filters=filters,
    )
    out = {"ClusterSummaries": [tr.cluster_summary(c) for c in page]}
    if token:
        out["NextToken"] = token
    return out


#: a NextToken's keyset position: the types of its values, per listing and sort (by name, by time)
_CLUSTER_KEY = {True: ((str,), (str,)), False: ((int, float), (str,))}
_NODE_KEY = {True: ((str,), (str,)), False: ((int, float), (int,), (str,))}


def _token_key(token: str, filters: Mapping[str, Any], kinds: tuple[tuple[type, ...], ...]) -> list[Any]:
    """The keyset position in a NextToken, type-checked (it goes into SQL, where a forged key would not fail)."""
    key = decode_token(token, filters)
    ok = len(key) == len(kinds) and all(
        isinstance(v, k) and not isinstance(v, bool) for v, k in zip(key, kinds, strict=True))
    if not ok:
        raise ValidationException("Invalid pagination token: NextToken is malformed.")
    return key


def _cut(rows: list[T], limit: int, filters: Mapping[str, Any], key: Callable[[T], tuple[Any, ...]]
         ) -> tuple[list[T], str | None]:
    """A keyset page read with ``limit + 1`` rows: its first ``limit`` and, when there were more, the NextToken of
    the last one's sort ``key``."""
    page = rows[:limit]
    return page, encode_token(key(page[-1]), filters) if len(rows) > limit else None


def _list_cluster_nodes_sql(svc: ClusterService, rec: ClusterRecord, p: Params,
                            filters: Mapping[str, Any]) -> tuple[list[NodeRecord], str | None]:
    """One page straight from the store (keyset in SQL): a page costs the same at 100 or 10,000 nodes."""
    by_name = p.get("SortBy") == "NAME"
    token = p.get("NextToken")
    after, before = p.get("CreationTimeAfter"), p.get("CreationTimeBefore")
    limit = p.get("MaxResults") or 100
    rows = svc.store.page_nodes(
        rec.cluster_id, by_name=by_name, descending=p.get("SortOrder", "Ascending") == "Descending",
        after=_token_key(token, filters, _NODE_KEY[by_name]) if token else None, limit=limit + 1,
        launched_after=epoch(after) if after is not None else None,
        launched_before=epoch(before) if before is not None else None,
    )
    return _cut(rows, limit, filters, (lambda n: (n.group, n.instance_id)) if by_name
                else (lambda n: (n.launch_time, n.seq, n.instance_id)))


def list_cluster_nodes(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    rec = svc.resolve(caller, p["ClusterName"])
    contains = p.get("InstanceGroupNameContains")
    if not contains:  # the common case pages in SQL; a substring filter keeps the exact in-Python path below
        filters = {k: p.get(k) for k in ("ClusterName", "CreationTimeAfter", "CreationTimeBefore",
                                         "InstanceGroupNameContains", "SortBy", "SortOrder")}
        page, token = _list_cluster_nodes_sql(svc, rec, p, filters)
        return _node_page(svc, rec, p, page, token)
    nodes = svc.nodes(rec)
    after, before = p.get("CreationTimeAfter"), p.get("CreationTimeBefore")
    if after is not None:
        nodes = [n for n in nodes if n.launch_time > epoch(after)]
    if before is not None:
        nodes = [n for n in nodes if n.launch_time < epoch(before)]
    if contains:
        nodes = [n for n in nodes if contains in n.group]
    by_name = p.get("SortBy") == "NAME"
    filters = {
        k: p.get(k)
        for k in ("ClusterName", "CreationTimeAfter", "CreationTimeBefore", "InstanceGroupNameContains", "SortBy",
                  "SortOrder")
    }
    page, token = paginate(
        nodes,
        (lambda n: (n.group, n.instance_id)) if by_name else (lambda n: (n.launch_time, n.seq, n.instance_id)),
        descending=p.get("SortOrder", "Ascending") == "Descending",
        max_results=p.get("MaxResults"),
        next_token=p.get("NextToken"),
        filters=filters,
    )
    return _node_page(svc, rec, p, page, token)


def _node_page(svc: ClusterService, rec: ClusterRecord, p: Params, page: list[NodeRecord],
               token: str | None) -> dict[str, Any]:
    types = {g.name: g.instance_type for g in rec.spec.instance_groups}
    include_logical = bool(p.get("IncludeNodeLogicalIds"))
    desired: dict[str, str] = {}  # per group, not per node
    images = svc.image_catalog()
    for n in page:
        if n.group not in desired:
            desired[n.group] = _desired_image(images, rec, n.group)
    out: dict[str, Any] = {
        "ClusterNodeSummaries": [
            tr.node_summary(n, types.get(n.group), include_logical,
                            _version_status(images, n.image_id, desired[n.group]))
            for n in page
        ]
    }
    if token:
        out["NextToken"] = token
    return out


def describe_cluster_node(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:

    rec = svc.resolve(caller, p["ClusterName"])
    node_id, logical_id = p.get("NodeId"), p.get("NodeLogicalId")
    if bool(node_id) == bool(logical_id):
        raise ValidationException("You can specify either NodeLogicalId or InstanceId, but not both.")
    node = svc.find_node(rec, node_id, logical_id)
    images = svc.image_catalog()
    desired = _desired_image(images, rec, node.group)
    view = tr.ImageView(node.image_id or desired, desired, _version_status(images, node.image_id, desired))
    return {"NodeDetails": tr.node_details(node, rec.spec.group(node.group), rec.region, view)}


def batch_delete_cluster_nodes(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:

    node_ids = list(p.get("NodeIds") or ())
    if not node_ids and not p.get("NodeLogicalIds"):
        raise ValidationException("Either NodeIds or NodeLogicalIds must be provided.")
    rec = svc.resolve(caller, p["ClusterName"])
    logical = list(p.get("NodeLogicalIds") or ())
    by_logical = {n.logical_id: n.instance_id for n in svc.nodes(rec) if n.logical_id}
    wanted = node_ids + [by_logical.get(x, x) for x in logical]
    deleted, failures = svc.batch_delete_nodes(caller, p["ClusterName"], wanted)
    out: dict[str, Any] = {
        "Successful": [d for d in deleted if d in node_ids],
        "Failed": [{"Code": f.code, "Message": f.message, "NodeId": f.node_id} for f in failures
                   if f.node_id in node_ids],
    }
    if logical:
        rev = {v: k for k, v in by_logical.items()}
        out["SuccessfulNodeLogicalIds"] = [rev[d] for d in deleted if d in rev and rev[d] in logical]
        out["FailedNodeLogicalIds"] = [
            {"Code": f.code, "Message": f.message, "NodeLogicalId": rev.get(f.node_id, f.node_id)}
            for f in failures if rev.get(f.node_id, f.node_id) in logical
        ]
    return out


def update_cluster_software(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    groups = [g["InstanceGroupName"] for g in p.get("InstanceGroups") or ()] or None
    deployment = tr.deployment_from_wire(p.get("DeploymentConfig"))
    rec = svc.update_software(caller, p["ClusterName"], groups, p.get("ImageId"), deployment)
    return {"ClusterArn": rec.arn}


def _batch_node_op(svc: ClusterService, caller: Caller, p: Params, op: str) -> dict[str, Any]:
    node_ids = list(p.get("NodeIds") or ())
    logical = list(p.get("NodeLogicalIds") or ())
    if not node_ids and not logical:
        raise ValidationException("Either NodeIds or NodeLogicalIds must be provided.")
    rec = svc.resolve(caller, p["ClusterName"])
    by_logical = {n.logical_id: n.instance_id for n in svc.nodes(rec) if n.logical_id}
    rev = {v: k for k, v in by_logical.items()}
    ok, failures = svc.batch_node_op(caller, p["ClusterName"], node_ids + [by_logical.get(x, x) for x in logical], op)
    out: dict[str, Any] = {
        "Successful": [i for i in ok if i in node_ids],
        "Failed": [{"NodeId": f.node_id, "ErrorCode": f.code, "Message": f.message} for f in failures
                   if f.node_id in node_ids],
    }
    if logical:
        out["SuccessfulNodeLogicalIds"] = [rev[i] for i in ok if rev.get(i) in logical]
        out["FailedNodeLogicalIds"] = [
            {"NodeLogicalId": rev.get(f.node_id, f.node_id), "ErrorCode": f.code, "Message": f.message}
            for f in failures if rev.get(f.node_id, f.node_id) in logical
        ]
    if not out["Successful"]:
        del out["Successful"]  # the model's list has min 1
    return out


def batch_reboot_cluster_nodes(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    return _batch_node_op(svc, caller, p, "reboot")


def batch_replace_cluster_nodes(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    return _batch_node_op(svc, caller, p, "replace")


def start_cluster_health_check(svc: ClusterService, caller: Caller, p: Params) -> dict[str, Any]:
    targets = [tr.health_check_target_from_wire(c) for c in p["DeepHealthCheckConfigurations"]]
    rec = svc.start_health_check(caller, p["ClusterName"], targets)
    return {"ClusterArn": rec.arn}


HANDLERS: dict[str, Handler] = {
    "StartClusterHealthCheck": start_cluster_health_check,
    "BatchRebootClusterNodes": batch_reboot_cluster_nodes,
    "BatchReplaceClusterNodes": batch_replace_cluster_nodes,
    "UpdateClusterSoftware": update_cluster_software,
    "CreateCluster": create_cluster,
    "UpdateCluster": update_cluster,
    "DescribeCluster": describe_cluster,
    "ListClusters": list_clusters,
    "DeleteCluster": delete_cluster,
    "ListClusterNodes": list_cluster_nodes,
    "DescribeClusterNode": describe_cluster_node,
    "BatchDeleteClusterNodes": batch_delete_cluster_nodes,
    "ListClusterEvents": list_cluster_events,
    "DescribeClusterEvent": describe_cluster_event,
    **operations.HANDLERS,
}
