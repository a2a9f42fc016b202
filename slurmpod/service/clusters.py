"""Cluster use cases behind CreateCluster, UpdateCluster, DeleteCluster, Describe/List and node calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from slurmpod import ids
from slurmpod.clock import Clock
from slurmpod.domain import events as ev
from slurmpod.domain.continuous import group_busy, initial_group_states, updated_group_states
from slurmpod.domain.model import ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.spec import ClusterSpec
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType
from slurmpod.domain.validation import merge_update, validate_create, validate_update
from slurmpod.errors import (
    ConflictException,
    ResourceInUse,
    ResourceNotFound,
    ValidationException,
    VersionConflict,
    validation_message,
)
from slurmpod.store.sql import SqlStore

# (SourceS3Uri, entry point) -> content digest of the snapshot; raises ValueError with a user-facing message
Snapshotter = Callable[[str, str | None], str]


@dataclass(frozen=True)
class Caller:
    """Who is calling: the account owns the clusters it creates."""

    account_id: str
    region: str


@dataclass(frozen=True)
class NodeDeleteFailure:
    node_id: str
    code: str
    message: str


class ClusterService:
    def __init__(
        self,
        store: SqlStore,
        clock: Clock,
        *,
        provider_name: str,
        strict: bool = False,
        wake: Callable[[], None] = lambda: None,
        snapshotter: Snapshotter | None = None,
        image_resolver: Callable[[str | None], str] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.provider_name = provider_name
        self.strict = strict
        self.wake = wake
        self.snapshotter = snapshotter
        self.image_resolver = image_resolver

    # ---- lookups --------------------------------------------------------------------------------

    def resolve(self, caller: Caller, name_or_arn: str) -> ClusterRecord:
        parsed = ids.parse_cluster_arn(name_or_arn)
        rec: ClusterRecord | None
        if parsed:
            region, account, cluster_id = parsed
            rec = self.store.get_cluster(cluster_id)
            if rec and (rec.account_id != caller.account_id or rec.region != region or account != rec.account_id):
                rec = None
        else:
            rec = self.store.find_cluster(caller.account_id, name_or_arn)
        if rec is None:
            raise ResourceNotFound(f"Cluster {name_or_arn} not found.")
        return rec

    def list_clusters(self, caller: Caller) -> list[ClusterRecord]:
        return self.store.list_clusters(caller.account_id)

    def nodes(self, cluster: ClusterRecord) -> list[NodeRecord]:
        return [n for n in self.store.list_nodes(cluster.cluster_id) if n.status != InstanceStatus.NOT_FOUND]

    def find_node(self, cluster: ClusterRecord, node_id: str | None, logical_id: str | None) -> NodeRecord:
        for n in self.nodes(cluster):
            if (node_id and n.instance_id == node_id) or (logical_id and n.logical_id == logical_id):
                return n
        raise ResourceNotFound(f"Node {node_id or logical_id} not found in cluster {cluster.name}.")

    # ---- mutations ------------------------------------------------------------------------------

    def _snapshots(self, spec: ClusterSpec, previous: dict[str, str] | None = None) -> dict[str, str]:
        """Snapshots every group's lifecycle source now, so all nodes of this operation run the same files."""
        out: dict[str, str] = {}
        cache: dict[tuple[str, str | None], str] = {}
        for g in spec.instance_groups:
            lcc = g.life_cycle_config
            if lcc is None or not lcc.source_s3_uri or self.snapshotter is None:
                continue
            key = (lcc.source_s3_uri, lcc.entry_point)
            if key not in cache:
                try:
                    cache[key] = self.snapshotter(*key)
                except ValueError as exc:
                    raise ValidationException(
                        f"Failed to read LifeCycleConfig.SourceS3Uri {key[0]} for instance group {g.name}: {exc}"
                    ) from exc
            out[g.name] = cache[key]
        return out

    def create(self, caller: Caller, spec: ClusterSpec) -> ClusterRecord:
        findings = validate_create(spec, strict=self.strict)
        if findings:
            raise ValidationException(validation_message(findings))
        if self.store.find_cluster(caller.account_id, spec.name):
            raise ResourceInUse(f"Cluster {spec.name} already exists.")
        snapshots = self._snapshots(spec)
        cluster_id = ids.new_cluster_id()
        now = self.clock.now()
        rec = ClusterRecord(
            cluster_id=cluster_id,
            account_id=caller.account_id,
            region=caller.region,
            name=spec.name,
            arn=ids.cluster_arn(caller.region, caller.account_id, cluster_id),
            spec=spec,
            status=ClusterStatus.CREATING,
            creation_time=now,
            operation_id=ids.new_operation_id(),
            lifecycle_snapshots=snapshots,
            provider=self.provider_name,
            group_states=initial_group_states(spec, now) if spec.continuous else {},
        )
        first = ev.finish(ev.cluster_event(spec.name, "creation", "started"), rec, ids.new_event_id(), now)
        self.store.create_cluster(rec, [first])
        self.wake()
        return rec

    def update(
        self,
        caller: Caller,
        name_or_arn: str,
        requested: ClusterSpec,
        groups_to_delete: Sequence[str],
        *,
        orchestrator_given: bool,
    ) -> ClusterRecord:
        for _ in range(5):
            cur = self.resolve(caller, name_or_arn)
            findings = validate_update(
                cur.spec, requested, tuple(groups_to_delete), strict=self.strict,
                orchestrator_given=orchestrator_given,
            )
            if findings:
                raise ValidationException(validation_message(findings))
            if cur.status != ClusterStatus.IN_SERVICE:
                raise ConflictException(
                    f"Cluster {cur.name} is in {cur.status.value} status and cannot be updated. "
                    "Wait until it is InService."
                )
            new_spec = merge_update(cur.spec, requested, tuple(groups_to_delete), orchestrator_given)
            snapshots = {**dict(cur.lifecycle_snapshots), **self._snapshots(new_spec)}
            now = self.clock.now()
            continuous = new_spec.continuous
            upd = replace(
                cur,
                spec=new_spec,
                # Continuous clusters stay InService: each group tracks its own progress (desired state)
                last_good_spec=cur.last_good_spec if continuous else cur.spec,
                status=ClusterStatus.IN_SERVICE if continuous else ClusterStatus.UPDATING,
                group_states=updated_group_states(cur.spec, new_spec, cur.group_states, now) if continuous else {},
                failure_message=None,
                operation_id=ids.new_operation_id(),
                generation=cur.generation + 1,
                lifecycle_snapshots={
                    g.name: snapshots[g.name] for g in new_spec.instance_groups if g.name in snapshots
                },
            )
            started = ev.finish(ev.cluster_event(cur.name, "update", "started"), upd, ids.new_event_id(), now)
            try:
                stored = self.store.update_cluster(upd, [started])
            except VersionConflict:
                continue
            self.wake()
            return stored
        raise ConflictException(f"Cluster {name_or_arn} is being changed concurrently; retry.")

    def delete(self, caller: Caller, name_or_arn: str) -> ClusterRecord:
        for _ in range(5):
            cur = self.resolve(caller, name_or_arn)
            if cur.status == ClusterStatus.DELETING:
                return cur
            now = self.clock.now()
            upd = replace(cur, status=ClusterStatus.DELETING, operation_id=ids.new_operation_id())
            started = ev.finish(ev.cluster_event(cur.name, "deletion", "started"), upd, ids.new_event_id(), now)
            try:
                stored = self.store.update_cluster(upd, [started])
            except VersionConflict:
                continue
            self.wake()
            return stored
        raise ConflictException(f"Cluster {name_or_arn} is being changed concurrently; retry.")

    def batch_delete_nodes(
        self, caller: Caller, name_or_arn: str, node_ids: Sequence[str]
    ) -> tuple[list[str], list[NodeDeleteFailure]]:
        """Marks nodes for removal and shrinks their groups; per-node failures use the modeled codes."""
        for _ in range(5):
            cur = self.resolve(caller, name_or_arn)
            if cur.status != ClusterStatus.IN_SERVICE:
                raise ConflictException(
                    f"Cluster {cur.name} is in {cur.status.value} status; nodes can be deleted only while it is "
                    "InService."
                )
            nodes = {n.instance_id: n for n in self.nodes(cur)}
            deleted: list[str] = []
            failures: list[NodeDeleteFailure] = []
            counts = {g.name: g.instance_count for g in cur.spec.instance_groups}
            marked: list[NodeRecord] = []
            for nid in dict.fromkeys(node_ids):
                node = nodes.get(nid)
                if node is None:
                    failures.append(NodeDeleteFailure(nid, "NodeIdNotFound", f"Node {nid} not found."))
                    continue
                group = cur.spec.group(node.group)
                if group_busy(cur.group_states, node.group):
                    raise ConflictException(
                        f"Instance group {node.group} is {cur.group_states[node.group].status.value}; nodes can be "
                        "deleted once it is InService."
                    )
                if group is not None and group.node_type == NodeType.CONTROLLER:
                    failures.append(NodeDeleteFailure(
                        nid, "NodeIdInUse", f"Node {nid} is a Slurm controller node and cannot be deleted."))
                    continue
                if not node.active:
                    failures.append(NodeDeleteFailure(
                        nid, "InvalidNodeStatus", f"Node {nid} is already being deleted."))
                    continue
                if node.status not in (InstanceStatus.RUNNING, InstanceStatus.FAILURE):
                    failures.append(NodeDeleteFailure(
                        nid, "InvalidNodeStatus",
                        f"Node {nid} is in {node.status.value} status; wait for it to finish its current change."))
                    continue
                counts[node.group] -= 1
                marked.append(replace(node, status=InstanceStatus.SHUTTING_DOWN, message="Deleted by request"))
                deleted.append(nid)
            if not marked:
                return deleted, failures
            new_groups = tuple(replace(g, instance_count=max(counts[g.name], 0)) for g in cur.spec.instance_groups)
            upd = replace(cur, spec=cur.spec.with_groups(new_groups))
            upd = replace(upd, last_good_spec=upd.spec)
            now = self.clock.now()
            evs: list[EventRecord] = [
                ev.finish(ev.instance_terminating(cur.name, n.group, n.instance_id), upd, ids.new_event_id(), now)
                for n in marked
            ]
            try:
                self.store.update_cluster(upd, evs, changed_nodes=marked)
            except VersionConflict:
                continue
            self.wake()
            return deleted, failures
        raise ConflictException(f"Cluster {name_or_arn} is being changed concurrently; retry.")
