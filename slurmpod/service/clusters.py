"""Cluster use cases behind CreateCluster, UpdateCluster, DeleteCluster, Describe/List; the node calls are in
``service.nodes``. Every change of an existing cluster goes through ``retry_cluster`` (read, decide, write
version-checked, retry on a lost race)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slurmpod import ids
from slurmpod.clock import Clock
from slurmpod.domain import events as ev
from slurmpod.domain.continuous import group_busy, initial_group_states, updated_group_states
from slurmpod.domain.deep_health import HealthCheckTarget
from slurmpod.domain.legacy import (
    BOTH_MESSAGE,
    PP_FILE,
    PROVISIONING_PARAMETERS,
    apply_provisioning_parameters,
    is_api_driven,
)
from slurmpod.domain.model import ClusterRecord, ClusterSummary, NodeRecord
from slurmpod.domain.software import deployment_findings, new_software_update, refresh_schedules, schedule_findings
from slurmpod.domain.spec import ClusterSpec, DeploymentSpec, InstanceGroupSpec, SlurmConfig
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType, SoftwareUpdateStatus
from slurmpod.domain.transitions import cluster_to
from slurmpod.domain.validation import merge_update, validate_create, validate_update
from slurmpod.errors import (
    ConflictException,
    ResourceInUse,
    ResourceNotFound,
    ValidationException,
    validation_message,
)
from slurmpod.lifecycle.images import CATALOG_SETTING, Image, ImageCatalog, ImageError
from slurmpod.service import health_checks, slurm_versions
from slurmpod.service import nodes as node_ops
from slurmpod.service.nodes import NodeDeleteFailure
from slurmpod.store.protocol import Store
from slurmpod.store.retry import ClusterWrite, ConflictRetriesExhausted, Retried, retry_on_conflict


@dataclass(frozen=True)
class SnapshotInfo:
    digest: str
    provisioning_parameters: Mapping[str, Any] | None = None  # legacy topology file, when the source has one


# (SourceS3Uri, entry point) -> the snapshot taken now; raises ValueError with a user-facing message
Snapshotter = Callable[[str, str | None], SnapshotInfo]


@dataclass(frozen=True)
class Caller:
    """Who is calling: the account owns the clusters it creates, in the region of the call (a cluster is seen
    only in its own region). ``access_key_id``: the key that signed the call ("" when not known)."""

    account_id: str
    region: str
    access_key_id: str = ""


def _owned(caller: Caller, parsed: tuple[str, str, str], rec: ClusterRecord | None) -> ClusterRecord | None:
    """``rec`` (read by the id of the ARN ``parsed``: region, account, id) if the ARN and the caller name its
    account and region, else None: another account's cluster is "not found"."""
    region, account, _ = parsed
    if rec and (rec.account_id != caller.account_id or account != rec.account_id
                or rec.region != region or rec.region != caller.region):
        return None
    return rec


class ClusterService:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        provider_name: str,
        strict: bool = False,
        wake: Callable[[], None] = lambda: None,
        snapshotter: Snapshotter | None = None,
        images: ImageCatalog | None = None,
        secret_check: Callable[[str, str], str | None] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.provider_name = provider_name
        self.strict = strict
        self.wake = wake
        self.snapshotter = snapshotter
        self.images = images
        # (secret ARN, caller's account) -> None when usable as a database secret, else a finding
        self.secret_check = secret_check

    # ---- lookups --------------------------------------------------------------------------------

    def resolve(self, caller: Caller, name_or_arn: str) -> ClusterRecord:
        parsed = ids.parse_cluster_arn(name_or_arn)
        rec: ClusterRecord | None
        if parsed:
            rec = _owned(caller, parsed, self.store.get_cluster(parsed[2]))
        else:
            rec = self.store.find_cluster(caller.account_id, caller.region, name_or_arn)
        if rec is None:
            raise ResourceNotFound(f"Cluster {name_or_arn} not found.")
        return rec

    def describe_view(self, caller: Caller, name_or_arn: str
                      ) -> tuple[ClusterRecord, list[NodeRecord], ImageCatalog | None]:
        """``resolve``, the cluster's ``node_tally`` and ``image_catalog``: what DescribeCluster reads, read
        together (one round trip on PostgreSQL)."""
        parsed = ids.parse_cluster_arn(name_or_arn)
        setting = CATALOG_SETTING if self.images is not None else None
        if parsed:
            rec, tally, raw = self.store.cluster_view(cluster_id=parsed[2], setting=setting)
            rec = _owned(caller, parsed, rec)
        else:
            rec, tally, raw = self.store.cluster_view(account_id=caller.account_id, region=caller.region,
                                                      name=name_or_arn, setting=setting)
        if rec is None:
            raise ResourceNotFound(f"Cluster {name_or_arn} not found.")
        return rec, tally, self.images.pinned(raw) if self.images is not None else None

    def list_clusters(self, caller: Caller) -> list[ClusterRecord]:
        return self.store.list_clusters(caller.account_id, caller.region)

    def image_catalog(self) -> ImageCatalog | None:
        """The image catalogue as read now, for one request's lookups (one store read, whatever the lookups)."""
        return self.images.snapshot() if self.images is not None else None

    def cluster_summaries(self, caller: Caller) -> list[ClusterSummary]:
        """ListClusters' view: no specs read."""
        return self.store.list_cluster_summaries(caller.account_id, caller.region)

    def cluster_summary_page(self, caller: Caller, *, by_name: bool, descending: bool, after: Sequence[Any] | None,
                             limit: int, created_after: float | None, created_before: float | None
                             ) -> list[ClusterSummary]:
        """One keyset page of ``cluster_summaries`` (sorted and cut in the store)."""
        return self.store.page_cluster_summaries(caller.account_id, caller.region, by_name=by_name,
                                                 descending=descending, after=after, limit=limit,
                                                 created_after=created_after, created_before=created_before)

    def nodes(self, cluster: ClusterRecord) -> list[NodeRecord]:
        return [n for n in self.store.list_nodes(cluster.cluster_id) if n.status != InstanceStatus.NOT_FOUND]

    def find_node(self, cluster: ClusterRecord, node_id: str | None, logical_id: str | None) -> NodeRecord:
        for n in self.nodes(cluster):
            if (node_id and n.instance_id == node_id) or (logical_id and n.logical_id == logical_id):
                return n
        raise ResourceNotFound(f"Node {node_id or logical_id} not found in cluster {cluster.name}.")

    def retry_cluster(
        self, caller: Caller, name_or_arn: str, change: Callable[[ClusterRecord], ClusterWrite | None]
    ) -> Retried:
        """``retry_on_conflict`` over the caller's cluster ``name_or_arn``; losing every race is a ConflictException."""
        try:
            return retry_on_conflict(self.store, lambda: self.resolve(caller, name_or_arn), change,
                                     what=f"cluster {name_or_arn}")
        except ConflictRetriesExhausted as exc:
            raise ConflictException(f"Cluster {name_or_arn} is being changed concurrently; retry.") from exc

    # ---- mutations ------------------------------------------------------------------------------

    def _snapshots(self, spec: ClusterSpec) -> dict[str, SnapshotInfo]:
        """Snapshots every group's lifecycle source now, so all nodes of this operation run the same files."""
        out: dict[str, SnapshotInfo] = {}
        cache: dict[tuple[str, str | None], SnapshotInfo] = {}
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

    @staticmethod
    def _provisioning_parameters(spec: ClusterSpec, infos: Mapping[str, SnapshotInfo]) -> Mapping[str, Any] | None:
        """The legacy topology file: the controller-ish group's source first (HyperPod reads it from there)."""
        for g in spec.instance_groups:
            info = infos.get(g.name)
            if info is not None and info.provisioning_parameters is not None:
                return info.provisioning_parameters
        return None

    def _legacy_topology(self, spec: ClusterSpec, infos: Mapping[str, SnapshotInfo]) -> ClusterSpec:
        """API-driven: the source must not carry provisioning_parameters.json. Legacy: roles come from it."""
        pp = self._provisioning_parameters(spec, infos)
        if is_api_driven(spec):
            if pp is not None:
                raise ValidationException(BOTH_MESSAGE)
            return spec
        if self.snapshotter is None:  # simulated provider: no sources are read; legacy clusters stay role-less
            return spec
        if pp is None:
            raise ValidationException(
                f"Cluster {spec.name} has no SlurmConfig in its instance groups and no {PP_FILE} in its "
                "LifeCycleConfig source: add SlurmConfig to every instance group (API-driven topology) or the file."
            )
        derived, findings = apply_provisioning_parameters(spec, pp)
        if findings:
            raise ValidationException(validation_message(findings))
        return derived

    def create(self, caller: Caller, spec: ClusterSpec) -> ClusterRecord:
        findings = validate_create(spec, strict=self.strict) + schedule_findings(spec.instance_groups, self.clock.now())
        findings += self._secret_findings(caller, spec)
        findings += self._image_findings(spec.instance_groups)
        if findings:
            raise ValidationException(validation_message(findings))
        if self.store.find_cluster(caller.account_id, caller.region, spec.name):
            raise ResourceInUse(f"Cluster {spec.name} already exists.")
        infos = self._snapshots(spec)
        spec = self._legacy_topology(spec, infos)
        images = self.image_catalog()
        slurm = slurm_versions.mix_findings(
            spec, slurm_versions.desired_versions(spec, lambda image_id: self._image_of(image_id, images)))
        if slurm:
            raise ValidationException(validation_message(slurm))
        snapshots = {g: i.digest for g, i in infos.items()}
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
        rec = replace(rec, schedules=refresh_schedules(rec, now))
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
        def change(cur: ClusterRecord) -> ClusterWrite:
            nonlocal requested
            infos = self._snapshots(requested) if requested.instance_groups else {}
            if cur.spec.topology_source == PROVISIONING_PARAMETERS:
                requested = self._legacy_roles(cur.spec, requested, infos)
            findings = validate_update(
                cur.spec, requested, tuple(groups_to_delete), strict=self.strict,
                orchestrator_given=orchestrator_given,
            )
            findings += schedule_findings(requested.instance_groups, self.clock.now())
            findings += self._secret_findings(caller, requested)
            findings += self._image_findings(requested.instance_groups, cur.spec)
            if findings:
                raise ValidationException(validation_message(findings))
            if cur.status != ClusterStatus.IN_SERVICE:
                raise ConflictException(
                    f"Cluster {cur.name} is in {cur.status.value} status and cannot be updated. "
                    "Wait until it is InService."
                )
            new_spec = merge_update(cur.spec, requested, tuple(groups_to_delete), orchestrator_given)
            # a new group (or one that names another ImageId) must run a Slurm the controllers can work with
            versions = slurm_versions.desired_versions(new_spec, self._image_of)
            for g, vs in slurm_versions.running_versions(self.nodes(cur), self._image_of).items():
                old, new = cur.spec.group(g), new_spec.group(g)
                if vs and old is not None and new is not None and old.image_id == new.image_id:
                    versions[g] = max(vs, key=slurm_versions.release_of)
            slurm = slurm_versions.mix_findings(new_spec, versions)
            if slurm:
                raise ValidationException(validation_message(slurm))
            snapshots = {**dict(cur.lifecycle_snapshots), **{g: i.digest for g, i in infos.items()}}
            now = self.clock.now()
            continuous = new_spec.continuous
            upd = cluster_to(
                cur,
                # Continuous clusters stay InService: each group tracks its own progress (desired state)
                ClusterStatus.IN_SERVICE if continuous else ClusterStatus.UPDATING,
                spec=new_spec,
                last_good_spec=cur.last_good_spec if continuous else cur.spec,
                group_states=updated_group_states(cur.spec, new_spec, cur.group_states, now) if continuous else {},
                failure_message=None,
                operation_id=ids.new_operation_id(),
                generation=cur.generation + 1,
                lifecycle_snapshots={
                    g.name: snapshots[g.name] for g in new_spec.instance_groups if g.name in snapshots
                },
            )
            upd = replace(upd, schedules=refresh_schedules(upd, now))
            started = ev.finish(ev.cluster_event(cur.name, "update", "started"), upd, ids.new_event_id(), now)
            return ClusterWrite(upd, [started])

        stored = self.retry_cluster(caller, name_or_arn, change).record
        self.wake()
        return stored

    def _secret_findings(self, caller: Caller, spec: ClusterSpec) -> list[str]:
        adb = spec.accounting_database
        if adb is None:
            return []
        if self.secret_check is None:
            return ["AccountingDatabase is not supported by this server's provider."]
        problem = self.secret_check(adb.secret_arn, caller.account_id)
        return [problem] if problem else []

    def _image_of(self, image_id: str | None, images: ImageCatalog | None = None) -> Image | None:
        """The catalogue's image for an ImageId (``None``/``default``: the latest release); None if unknown.
        ``images``: a snapshot of the catalogue (``ImageCatalog.snapshot``) to look in instead of reading it."""
        catalog = images if images is not None else self.images
        if catalog is None:
            return None
        try:
            return catalog.resolve(image_id)
        except ImageError:
            return None

    def _image_findings(self, groups: Sequence[InstanceGroupSpec], current: ClusterSpec | None = None) -> list[str]:
        """An ImageId that is not in the image catalogue (``default`` always is); a group keeping its current
        ImageId is not checked again (UpdateCluster repeats it)."""
        if self.images is None:
            return []
        out: list[str] = []
        for g in groups:
            if g.image_id in (None, "", "default"):
                continue
            cur = current.group(g.name) if current is not None else None
            if cur is not None and cur.image_id == g.image_id:
                continue
            try:
                self.images.resolve(g.image_id)
            except ImageError as exc:
                out.append(f"Instance group {g.name}: {exc}")
        return out

    def _legacy_roles(
        self, current: ClusterSpec, requested: ClusterSpec, infos: Mapping[str, SnapshotInfo]
    ) -> ClusterSpec:
        """A legacy cluster's update: existing groups keep their derived roles; new groups take theirs from the
        source's provisioning_parameters.json (or join as workers in `dev`)."""
        pp = self._provisioning_parameters(requested, infos)
        derived = apply_provisioning_parameters(requested, pp)[0] if pp is not None else requested
        groups: list[InstanceGroupSpec] = []
        for g in requested.instance_groups:
            cur = current.group(g.name)
            if cur is not None and cur.slurm_config is not None:
                groups.append(replace(g, slurm_config=cur.slurm_config))
            else:
                new = derived.group(g.name)
                sc = new.slurm_config if new is not None and new.slurm_config else SlurmConfig(NodeType.COMPUTE)
                groups.append(replace(g, slurm_config=sc))
        return replace(requested, instance_groups=tuple(groups))

    def migrate(self, caller: Caller, name_or_arn: str) -> ClusterRecord:
        """Converts a legacy cluster to API-driven SlurmConfig in place (HyperPod has no such path)."""
        def change(cur: ClusterRecord) -> ClusterWrite:
            if cur.spec.topology_source != PROVISIONING_PARAMETERS:
                raise ValidationException(f"Cluster {cur.name} already uses API-driven SlurmConfig.")
            now = self.clock.now()
            spec = replace(cur.spec, topology_source="api")
            upd = replace(cur, spec=spec, last_good_spec=spec if cur.last_good_spec is not None else None)
            done = ev.finish(ev.EventDraft(
                ev.ResourceType.CLUSTER, ev.EventLevel.INFO,
                f"Cluster {cur.name} migrated from {PP_FILE} to API-driven SlurmConfig"), upd, ids.new_event_id(), now)
            return ClusterWrite(upd, [done])

        return self.retry_cluster(caller, name_or_arn, change).record

    def update_software(
        self,
        caller: Caller,
        name_or_arn: str,
        groups: Sequence[str] | None,
        image_id: str | None,
        deployment: DeploymentSpec,
    ) -> ClusterRecord:
        """UpdateClusterSoftware: records a rolling root-volume replacement; the reconciler carries it out.

        ``deployment`` is the request's deployment configuration (echoed as ActiveSoftwareUpdateConfig)."""
        findings = deployment_findings(deployment)
        if groups is not None and len(set(groups)) != len(groups):
            findings.append("InstanceGroups contains duplicate instance group names.")
        if findings:
            raise ValidationException(validation_message(findings))
        try:
            target = self.images.resolve(image_id) if self.images else None
        except ImageError as exc:
            raise ValidationException(str(exc)) from exc
        def change(cur: ClusterRecord) -> ClusterWrite:
            names = list(groups) if groups else [g.name for g in cur.spec.instance_groups]
            unknown = [g for g in names if cur.spec.group(g) is None]
            if unknown:
                raise ValidationException(f"Instance group(s) {', '.join(unknown)} not found in cluster {cur.name}.")
            if cur.status != ClusterStatus.IN_SERVICE or cur.software_update is not None:
                raise ConflictException(
                    f"Cluster {cur.name} is in {cur.status.value} status; UpdateClusterSoftware needs InService "
                    "(one software update at a time)."
                )
            busy = [g for g in names if group_busy(cur.group_states, g)]
            if busy:
                raise ConflictException(f"Instance group(s) {', '.join(busy)} are Creating or Updating.")
            upgrade = False
            if target is not None:
                running = slurm_versions.running_versions(self.nodes(cur), self._image_of)
                slurm = slurm_versions.update_findings(cur.spec, running, names, target)
                if slurm:
                    raise ValidationException(validation_message(slurm))
                upgrade = slurm_versions.is_upgrade(running, names, target)
            now = self.clock.now()
            su = new_software_update(ids.new_operation_id(), target.image_id if target else (image_id or "default"),
                                     names, deployment, now, slurm_upgrade=upgrade)
            in_progress = {g: SoftwareUpdateStatus.IN_PROGRESS for g in names}
            upd = cluster_to(cur, ClusterStatus.SYSTEM_UPDATING, software_update=su, operation_id=su.operation_id,
                          software_update_status={**cur.software_update_status, **in_progress})
            evs = [ev.finish(ev.software_update_initiated(cur.name, g), upd, ids.new_event_id(), now) for g in names]
            return ClusterWrite(upd, evs)

        stored = self.retry_cluster(caller, name_or_arn, change).record
        self.wake()
        return stored

    def batch_node_op(
        self, caller: Caller, name_or_arn: str, node_ids: Sequence[str], op: str
    ) -> tuple[list[str], list[NodeDeleteFailure]]:
        """BatchRebootClusterNodes (``reboot``) and BatchReplaceClusterNodes (``replace``): see ``service.nodes``."""
        return node_ops.batch_node_op(self, caller, name_or_arn, node_ids, op)

    def start_health_check(self, caller: Caller, name_or_arn: str,
                           targets: Sequence[HealthCheckTarget]) -> ClusterRecord:
        """StartClusterHealthCheck: see ``service.health_checks``."""
        return health_checks.start_health_check(self, caller, name_or_arn, targets)

    def delete(self, caller: Caller, name_or_arn: str) -> ClusterRecord:
        def change(cur: ClusterRecord) -> ClusterWrite | None:
            if cur.status == ClusterStatus.DELETING:
                return None
            upd = cluster_to(cur, ClusterStatus.DELETING, operation_id=ids.new_operation_id())
            started = ev.finish(ev.cluster_event(cur.name, "deletion", "started"), upd, ids.new_event_id(),
                                self.clock.now())
            return ClusterWrite(upd, [started])

        done = self.retry_cluster(caller, name_or_arn, change)
        if done.stored is not None:
            self.wake()
        return done.record

    def batch_delete_nodes(
        self, caller: Caller, name_or_arn: str, node_ids: Sequence[str]
    ) -> tuple[list[str], list[NodeDeleteFailure]]:
        """BatchDeleteClusterNodes: see ``service.nodes``."""
        return node_ops.batch_delete_nodes(self, caller, name_or_arn, node_ids)
