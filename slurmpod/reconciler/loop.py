"""The reconcile loop: observe (store + in-flight work) -> plan (pure) -> apply (store writes, workers).

Slow work (booting a node, removing one, rewriting slurm.conf, tearing a cluster down) runs in a worker
pool; each worker checkpoints progress in the store (node boot phases), so a server killed at any moment
resumes from the last completed step and never launches an instance twice (instance ids are recorded
before any launch, and providers are idempotent on them).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from slurmpod import ids, metrics
from slurmpod.clock import Clock
from slurmpod.domain import events as ev
from slurmpod.domain.model import PHASES, ClusterRecord, EventRecord, NodeRecord
from slurmpod.domain.software import new_software_update
from slurmpod.domain.status import ClusterStatus, EventLevel, InstanceStatus, NodeType, check_cluster_transition
from slurmpod.errors import VersionConflict
from slurmpod.notify import Notifier
from slurmpod.reconciler import plan as p
from slurmpod.reconciler import rolling
from slurmpod.reconciler.runtime import ClusterRuntime, NodeBootError, TopologyDriftError
from slurmpod.store.sql import SqlStore

log = logging.getLogger("slurmpod.reconciler")

MAX_BACKOFF = 300.0
QUIET_REPLAN = 30.0  # a skipped (unchanged, settled) cluster is planned again at least this often
CAPACITY_KEY = "capacity"


def _with_topology(cluster: ClusterRecord, topology: str) -> ClusterRecord:
    return replace(cluster, applied_topology=topology)


class Reconciler:
    def __init__(
        self,
        store: SqlStore,
        runtime: ClusterRuntime,
        clock: Clock,
        *,
        interval: float = 2.0,
        max_workers: int = 8,
        min_count_timeout: float = p.DEFAULT_MIN_COUNT_TIMEOUT,
        retry_delay: float = 2.0,
        drain_timeout: float = 3600.0,
        health_interval: float = 5.0,
        notifier: Notifier | None = None,
        image_lookup: Callable[[str | None], tuple[str, str]] | None = None,
        image: tuple[str, str] = ("ami-00000000000000000", "0.0.0"),
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.clock = clock
        self.interval = interval
        self.min_count_timeout = min_count_timeout
        self.retry_delay = retry_delay
        self.drain_timeout = drain_timeout
        # image id (None = latest) -> (image id, release); defaults to the fixed ``image``
        self.image_lookup = image_lookup or (lambda _i: image)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="slurmpod-work")
        self._busy: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.health_interval = health_interval
        self.notifier = notifier or Notifier(store)
        self._health_checked: dict[str, float] = {}
        self._suspects: dict[str, set[str]] = {}
        self._capacity: object = None
        self.last_pass_seconds = 0.0
        # cluster id -> (cluster version, nodes fingerprint, when) of its last pass that found nothing to do
        self._quiet: dict[str, tuple[int, tuple[int, int, int, int], float]] = {}

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="slurmpod-reconciler", daemon=True)
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and wait:
            self._thread.join(timeout=30)
        self._pool.shutdown(wait=wait, cancel_futures=True)

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        self._wake.set()

    def idle(self) -> bool:
        with self._lock:
            return not any(self._busy.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.run_once()
            except Exception:  # the one catch-all at the loop top: log and keep reconciling
                log.exception("reconcile pass failed")
            # a woken pass first waits twice as long as the last one took: while 10,000 nodes boot, back-to-back
            # passes (each reading every node) took half the CPU from the boot workers; now at most a third
            self._stop.wait(min(2 * self.last_pass_seconds, self.interval))
            self._wake.wait(self.interval)

    def run_once(self) -> None:
        started = time.monotonic()
        capacity = self.store.get_setting(CAPACITY_KEY)
        if capacity != self._capacity:
            self._capacity = capacity
            self.runtime.set_capacity(capacity or {})
            log.info("capacity table: %s", capacity or "unlimited")
        for cluster_id in self.store.cluster_ids():
            try:
                self._reconcile(cluster_id)
            except VersionConflict:
                self._wake.set()  # someone else wrote; plan again soon
            except Exception:
                log.exception("reconciling cluster %s failed", cluster_id)
        self.passes += 1
        self.last_pass_seconds = time.monotonic() - started
        metrics.RECONCILE_PASS.observe(self.last_pass_seconds)

    # ---- one cluster ----------------------------------------------------------------------------

    def _busy_for(self, cluster_id: str) -> frozenset[str]:
        with self._lock:
            return frozenset(self._busy.get(cluster_id, ()))

    def _submit(self, cluster_id: str, key: str, fn: Callable[[], None]) -> None:
        with self._lock:
            busy = self._busy.setdefault(cluster_id, set())
            if key in busy:
                return
            busy.add(key)

        def run() -> None:
            try:
                fn()
            except Exception:
                log.exception("work item %s of cluster %s failed", key, cluster_id)
            finally:
                with self._lock:
                    self._busy.get(cluster_id, set()).discard(key)
                self._wake.set()

        self._pool.submit(run)

    def _quiet_key(self, cluster: ClusterRecord) -> tuple[int, tuple[int, int, int, int]] | None:
        """What must not change for a quiet cluster to be skipped; None when it may not be skipped at all:
        only a settled cluster (InService/Failed, nothing in flight, no update or schedule, not Continuous,
        health check not due) whose plan depends on nothing but its rows."""
        if cluster.status not in (ClusterStatus.IN_SERVICE, ClusterStatus.FAILED) or cluster.spec.continuous:
            return None
        if cluster.software_update is not None or cluster.schedules or self._busy_for(cluster.cluster_id):
            return None
        return cluster.version, self.store.nodes_fingerprint(cluster.cluster_id)

    def _skip_unchanged(self, cluster: ClusterRecord) -> bool:
        """Idle pass cost in proportion to what changed: a cluster whose last pass planned nothing is skipped
        while its row and its nodes' fingerprint are unchanged (re-planned anyway every 30 s)."""
        quiet = self._quiet.get(cluster.cluster_id)
        if quiet is None or time.monotonic() - quiet[2] > QUIET_REPLAN:
            return False
        if time.monotonic() - self._health_checked.get(cluster.cluster_id, 0.0) >= self.health_interval:
            return False
        return self._quiet_key(cluster) == quiet[:2]

    def _reconcile(self, cluster_id: str) -> None:
        cluster = self.store.get_cluster(cluster_id)
        if cluster is None:
            self._quiet.pop(cluster_id, None)
            return
        if self._skip_unchanged(cluster):
            return
        self._quiet.pop(cluster_id, None)
        key = self._quiet_key(cluster)  # taken before the nodes are read: a write in between re-plans next pass
        nodes = tuple(self.store.list_nodes(cluster_id))
        obs = p.Observation(
            cluster=cluster,
            nodes=nodes,
            busy=self._busy_for(cluster_id),
            now=self.clock.now(),
            desired_topology=self.runtime.desired_topology(cluster),
            min_count_timeout=self.min_count_timeout,
        )
        by_id = {n.instance_id: n for n in nodes}
        now = time.monotonic()
        if now - self._health_checked.get(cluster_id, 0.0) >= self.health_interval:
            self._health_checked[cluster_id] = now
            try:
                self._check_health(cluster, nodes, obs.busy)
            except VersionConflict:
                pass
        actions = p.plan(obs)
        if key is not None and not actions and all(n.status == InstanceStatus.RUNNING for n in nodes):
            self._quiet[cluster_id] = (*key, time.monotonic())
        for action in actions:
            if isinstance(action, p.CreateNodes):
                self._create_nodes(cluster, action)
            elif isinstance(action, p.BootNode):
                iid = action.instance_id
                self._submit(cluster_id, iid, functools.partial(self._boot, cluster_id, iid))
            elif isinstance(action, p.RemoveNode):
                self._start_removal(cluster, by_id[action.instance_id], action.reason, obs.busy)
            elif isinstance(action, p.ApplyTopology):
                self._submit(cluster_id, "topology", lambda: self._apply_topology(cluster_id))
            elif isinstance(action, p.SetStatus):
                cluster = self._set_status(cluster, action)
            elif isinstance(action, rolling.StartNodeUpdates):
                cluster = self._start_node_updates(cluster, action)
            elif isinstance(action, rolling.ResumeNodeUpdate):
                iid = action.instance_id
                self._submit(cluster_id, iid, functools.partial(self._update_node, cluster_id, iid))
            elif isinstance(action, rolling.SetSoftwareUpdate):
                upd = replace(cluster, software_update=action.update)
                cluster = self.store.update_cluster(upd, [self._event(upd, d) for d in action.events])
            elif isinstance(action, rolling.BeginScheduledUpdate):
                cluster = self._begin_scheduled_update(cluster, action)
            elif isinstance(action, rolling.FinishSoftwareUpdate):
                cluster = self._finish_software_update(cluster, action)
            elif isinstance(action, p.NodeOp):
                iid = action.instance_id
                self._submit(cluster_id, iid, functools.partial(self._node_op, cluster_id, iid))
            elif isinstance(action, p.UpdateGroups):
                cluster = self._update_groups(cluster, action)
            elif isinstance(action, p.FinishDelete):
                self._submit(cluster_id, "delete", lambda: self._finish_delete(cluster_id))

    def _event(self, cluster: ClusterRecord, draft: ev.EventDraft) -> EventRecord:
        return ev.finish(draft, cluster, ids.new_event_id(), self.clock.now())

    def _create_nodes(self, cluster: ClusterRecord, action: p.CreateNodes) -> None:
        seq = self.store.max_node_seq(cluster.cluster_id)
        now = self.clock.now()
        group = cluster.spec.group(action.group)
        image_id, image_release = self.image_lookup(group.image_id if group else None)
        recs = []
        for k in range(action.count):
            seq += 1
            data = ({"address": action.takeover[k][0], "ctl_slot": action.takeover[k][1]}
                    if k < len(action.takeover) else {})
            recs.append(
                NodeRecord(
                    instance_id=ids.new_instance_id(),
                    cluster_id=cluster.cluster_id,
                    group=action.group,
                    seq=seq,
                    status=InstanceStatus.PENDING,
                    launch_time=now,
                    logical_id=f"{action.group}-{seq}",
                    image_id=image_id,
                    image_release=image_release,
                    lifecycle_digest=cluster.lifecycle_snapshots.get(action.group),
                    data=data,
                )
            )
        started = self._event(
            cluster,
            ev.instance_event(
                f"Instance creation started successfully in Cluster {cluster.name} and IG {action.group}",
                action.group, None,
            ),
        )
        self.store.add_nodes(recs, [started])
        self._wake.set()  # plan again now: the new records can boot in the next pass
        log.info("cluster %s: %d new instance(s) in %s", cluster.name, action.count, action.group)

    def _start_removal(self, cluster: ClusterRecord, node: NodeRecord, reason: str, busy: frozenset[str]) -> None:
        if node.instance_id in busy:
            return
        if node.status != InstanceStatus.SHUTTING_DOWN:
            upd = replace(node, status=InstanceStatus.SHUTTING_DOWN, message=reason)
            node = self.store.update_node(
                upd, [self._event(cluster, ev.instance_terminating(cluster.name, node.group, node.instance_id))]
            )
            log.info("node %s (%s): %s -> ShuttingDown (%s)", node.instance_id, node.group, "…", reason)
        self._submit(cluster.cluster_id, node.instance_id, lambda: self._remove(cluster.cluster_id, node.instance_id))

    def _set_status(self, cluster: ClusterRecord, action: p.SetStatus) -> ClusterRecord:
        check_cluster_transition(cluster.status, action.status)
        if action.status == ClusterStatus.FAILED and cluster.last_good_spec is None:
            # a failed creation releases everything, cluster-level services (the accounting host) included
            self.runtime.teardown_cluster(cluster)
        upd = replace(cluster, status=action.status, failure_message=action.failure_message)
        if action.spec is not None:
            upd = replace(upd, spec=action.spec)
        if action.mark_good:
            upd = replace(upd, last_good_spec=upd.spec)
        stored = self.store.update_cluster(upd, [self._event(upd, d) for d in action.events])
        log.info("cluster %s: %s -> %s%s", cluster.name, cluster.status.value, action.status.value,
                 f" ({action.failure_message})" if action.failure_message else "")
        return stored

    def _update_groups(self, cluster: ClusterRecord, action: p.UpdateGroups) -> ClusterRecord:
        upd = replace(cluster, group_states=dict(action.group_states))
        if action.spec is not None:
            upd = replace(upd, spec=action.spec)
        stored = self.store.update_cluster(upd, [self._event(upd, d) for d in action.events])
        for d in action.events:
            log.info("cluster %s: %s", cluster.name, d.description)
        return stored

    # ---- node operations and health ---------------------------------------------------------------

    def _node_op(self, cluster_id: str, instance_id: str) -> None:
        """Reboot or refresh a node, then hand it to the normal boot path (status Pending, phases trimmed)."""
        node = self.store.get_node(instance_id)
        cluster = self.store.get_cluster(cluster_id)
        if node is None or cluster is None or not node.data.get("op"):
            return
        op = str(node.data["op"])
        nodes = self.store.list_nodes(cluster_id)
        try:
            if op == "refresh":
                self.runtime.replace_root(cluster, node, nodes, node.image_id or self.image_lookup(None)[0])
                keep: tuple[str, ...] = ("launched",)
            else:
                self.runtime.reboot_node(cluster, node, nodes)
                keep = tuple(ph for ph in node.phases if ph in ("launched", "on_create", "on_init_complete"))
        except NodeBootError as exc:
            self._save_node(replace(node, status=InstanceStatus.FAILURE, message=exc.message,
                                    data={k: v for k, v in node.data.items() if k != "op"}),
                            ev.instance_event(f"Instance {op} {instance_id} in Cluster {cluster.name} and IG "
                                              f"{node.group} failed", node.group, instance_id,
                                              level=EventLevel.ERROR, failure=exc.message))
            return
        data = {k: v for k, v in node.data.items() if k != "op"}
        self._save_node(replace(node, status=InstanceStatus.PENDING, phases=keep, data=data, message=None))
        log.info("node %s (%s): %s done; rejoining", instance_id, node.group, op)
        self._wake.set()

    def _controller_changed(self, cluster: ClusterRecord, node: NodeRecord, nodes: tuple[NodeRecord, ...], *,
                            up: bool) -> NodeRecord:
        """A controller went down (a backup takes over) or came back: event + notification."""
        ctl_groups = {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}
        ctls = sorted((n for n in nodes if n.group in ctl_groups and n.active), key=lambda n: n.seq)
        host = node.hostname or node.instance_id
        if up:
            primary = bool(ctls) and ctls[0].instance_id == node.instance_id
            text = (f"Slurm controller {host} (instance {node.instance_id}) in Cluster {cluster.name} is back"
                    + (" and serves as primary again" if primary else " as a backup"))
            kind, level = "ControllerUp", EventLevel.INFO
            data = {k: v for k, v in node.data.items() if k != "controller_down"}
        else:
            others = [n for n in ctls if n.instance_id != node.instance_id and n.status == InstanceStatus.RUNNING]
            backup = others[0].hostname if others else None
            text = (f"Slurm controller {host} (instance {node.instance_id}) in Cluster {cluster.name} is down; "
                    + (f"backup controller {backup} takes over" if backup else "no backup controller serves"))
            kind, level = "ControllerDown", EventLevel.ERROR if not backup else EventLevel.WARN
            data = {**node.data, "controller_down": True}
        saved = self._save_node(replace(node, data=data),
                                ev.instance_event(text, node.group, node.instance_id, level=level))
        self.notifier.send(cluster, f"slurmpod: {kind} in {cluster.name}",
                           {"Event": kind, "InstanceId": node.instance_id, "Hostname": host, "Description": text},
                           self.clock.now())
        log.warning("cluster %s: %s", cluster.name, text)
        return saved

    def _check_health(self, cluster: ClusterRecord, nodes: tuple[NodeRecord, ...], busy: frozenset[str]) -> None:
        """Dead instances (NodeRecovery) and Slurm `Action:Replace/Reboot` requests become node operations."""
        if cluster.status != ClusterStatus.IN_SERVICE:
            return
        for restored, text in self.runtime.heal_services(cluster):
            level = EventLevel.WARN if restored else EventLevel.ERROR
            self.store.add_events([self._event(cluster, ev.EventDraft(ev.ResourceType.CLUSTER, level, text))])
            log.warning("cluster %s: %s", cluster.name, text)
        alive = dict(self.runtime.alive(cluster))
        requests = self.runtime.slurm_requests(cluster, nodes)
        for iid in self.runtime.unreachable(cluster, nodes):
            # slurmd gone twice in a row (two health checks) counts as unhealthy
            if iid in self._suspects.get(cluster.cluster_id, set()):
                alive[iid] = False
        self._suspects[cluster.cluster_id] = set(self.runtime.unreachable(cluster, nodes)) - {
            i for i, a in alive.items() if not a}
        automatic = (cluster.spec.node_recovery or "Automatic") == "Automatic"
        ctl_groups = {g.name for g in cluster.spec.groups_of(NodeType.CONTROLLER)}
        for n in nodes:
            if (n.group in ctl_groups and n.data.get("controller_down") and n.status == InstanceStatus.RUNNING
                    and alive.get(n.instance_id)):
                self._controller_changed(cluster, n, nodes, up=True)
                n = self.store.get_node(n.instance_id) or n
            if n.status != InstanceStatus.RUNNING or n.instance_id in busy or n.data.get("op"):
                continue
            if alive.get(n.instance_id) is False and n.group in ctl_groups:
                n = self._controller_changed(cluster, n, nodes, up=False)
            if alive.get(n.instance_id) is False:
                if automatic:
                    self._save_node(
                        replace(n, data={**n.data, "op": "reboot"}),
                        ev.instance_event(f"Instance {n.instance_id} in IG {n.group} is unhealthy (its processes are "
                                          "gone); NodeRecovery Automatic is rebooting it", n.group, n.instance_id,
                                          level=EventLevel.WARN))
                else:
                    self._save_node(
                        replace(n, status=InstanceStatus.FAILURE, message="Instance processes are no longer running"),
                        ev.instance_event(f"Instance {n.instance_id} in IG {n.group} is unhealthy; NodeRecovery is "
                                          "None, so it is left to the operator", n.group, n.instance_id,
                                          level=EventLevel.ERROR))
            elif n.instance_id in requests:
                action = requests[n.instance_id]
                op = "refresh" if action == "Replace" else "reboot"
                self._save_node(
                    replace(n, data={**n.data, "op": op, "resume_on_join": True}),
                    ev.instance_event(f"Slurm asked to {action.lower()} instance {n.instance_id} in IG {n.group} "
                                      f"(Action:{action}); its jobs have ended", n.group, n.instance_id))
            else:
                continue
            self._wake.set()

    # ---- software updates ---------------------------------------------------------------------

    def _start_node_updates(self, cluster: ClusterRecord, action: rolling.StartNodeUpdates) -> ClusterRecord:
        changed = []
        for iid in action.instance_ids:
            node = self.store.get_node(iid)
            if node is None:
                continue
            data = {**node.data, "update_to": action.image, "update_from": node.image_id, "update_step": "drain"}
            data.pop("rollback_failed", None)
            changed.append(replace(node, data=data))
        upd = replace(cluster, software_update=action.update)
        stored = self.store.update_cluster(upd, [self._event(upd, d) for d in action.events], changed_nodes=changed)
        log.info("cluster %s: software update batch %d: %s -> %s", cluster.name, action.update.batches,
                 ", ".join(action.instance_ids), action.image)
        self._wake.set()
        return stored

    def _begin_scheduled_update(self, cluster: ClusterRecord, action: rolling.BeginScheduledUpdate) -> ClusterRecord:
        now = self.clock.now()
        groups = sorted(action.fired)
        target = self.image_lookup(None)[0]
        su = new_software_update(ids.new_operation_id(), target, groups, action.deployment, now)
        schedules = {g: dict(v) for g, v in cluster.schedules.items()}
        for g, t in action.fired.items():
            schedules[g]["last_fired"] = t
        check_cluster_transition(cluster.status, ClusterStatus.SYSTEM_UPDATING)
        upd = replace(cluster, status=ClusterStatus.SYSTEM_UPDATING, software_update=su, schedules=schedules,
                      operation_id=su.operation_id,
                      software_update_status={**cluster.software_update_status, **{g: "InProgress" for g in groups}})
        drafts = [ev.EventDraft(ev.ResourceType.INSTANCE_GROUP, EventLevel.INFO,
                                f"InstanceGroup {g} in Cluster {cluster.name} has been scheduled for "
                                "UpdateClusterSoftware to latest.", group=g) for g in groups]
        stored = self.store.update_cluster(upd, [self._event(upd, d) for d in drafts])
        log.info("cluster %s: scheduled software update of %s to %s", cluster.name, ", ".join(groups), target)
        return stored

    def _finish_software_update(self, cluster: ClusterRecord, action: rolling.FinishSoftwareUpdate) -> ClusterRecord:
        su = cluster.software_update
        groups = su.groups if su else ()
        check_cluster_transition(cluster.status, ClusterStatus.IN_SERVICE)
        upd = replace(
            cluster, status=ClusterStatus.IN_SERVICE, software_update=None, failure_message=action.failure_message,
            software_update_status={**cluster.software_update_status, **{g: action.status for g in groups}},
        )
        stored = self.store.update_cluster(upd, [self._event(upd, d) for d in action.events])
        log.info("cluster %s: SystemUpdating -> InService (software update %s)", cluster.name, action.status)
        return stored

    def _save_node(self, node: NodeRecord, *drafts: ev.EventDraft) -> NodeRecord:
        cluster = self.store.get_cluster(node.cluster_id)
        evs = [self._event(cluster, d) for d in drafts] if cluster else []
        return self.store.update_node(node, evs)

    def _update_node(self, cluster_id: str, instance_id: str) -> None:
        """Root-volume replacement of one node, resumable at every step (drain, wait, replace, boot)."""
        node = self.store.get_node(instance_id)
        cluster = self.store.get_cluster(cluster_id)
        if node is None or cluster is None or not node.data.get("update_to") or cluster.software_update is None:
            return
        su = cluster.software_update
        target = str(node.data["update_to"])
        step = node.data.get("update_step", "drain")
        try:
            if step == "drain":
                ours = self.runtime.drain(cluster, node, self.store.list_nodes(cluster_id),
                                          "slurmpod: software update")
                node = self._save_node(replace(node, data={
                    **node.data, "update_step": "wait", "drained_by_us": ours or bool(node.data.get("drained_by_us")),
                    "wait_started": self.clock.now()}))
                step = "wait"
            if step == "wait":
                deadline = float(node.data.get("wait_started") or self.clock.now()) + self.drain_timeout
                while not self.runtime.jobs_done(cluster, node, self.store.list_nodes(cluster_id)):
                    if self._stop.is_set():
                        return
                    if self.clock.now() >= deadline:
                        log.warning("node %s: jobs still running after %.0f s; replacing anyway",
                                    instance_id, self.drain_timeout)
                        break
                    time.sleep(0.5)
                node = self._save_node(
                    replace(node, status=InstanceStatus.SYSTEM_UPDATING,
                            data={**node.data, "update_step": "replace"}),
                    ev.instance_event(f"Root volume replacement started for Instance {instance_id} in IG "
                                      f"{node.group}.", node.group, instance_id))
                step = "replace"
            if step == "replace":
                self.runtime.replace_root(cluster, node, self.store.list_nodes(cluster_id), target)
                image_id, release = self.image_lookup(target)
                node = self._save_node(replace(node, phases=("launched",), image_id=image_id, image_release=release,
                                               data={**node.data, "update_step": "boot"}))
            for phase in PHASES:
                if phase in node.phases:
                    continue
                if phase == "joined" and node.data.get("drained_by_us"):
                    self.runtime.resume(cluster, node, self.store.list_nodes(cluster_id))
                    node = self._save_node(replace(node, data={**node.data, "drained_by_us": False}))
                result = dict(self.runtime.boot_step(cluster, node, phase, self.store.list_nodes(cluster_id)))
                result.pop("applied_topology", None)
                result.pop("script", None)
                node = self._save_node(replace(node, phases=(*node.phases, phase), **result))
        except NodeBootError as exc:
            self._node_update_failed(cluster_id, instance_id, exc.message)
            return
        except Exception as exc:
            log.exception("software update of %s failed", instance_id)
            self._node_update_failed(cluster_id, instance_id, f"internal error: {exc}")
            return
        previous = str(node.data.get("update_from") or "")
        data = {k: v for k, v in node.data.items() if not k.startswith(("update_", "drained_by_us", "wait_"))}
        node = self._save_node(
            replace(node, status=InstanceStatus.RUNNING, message=None, last_software_update_time=self.clock.now(),
                    data=data),
            ev.instance_event(f"Instance {instance_id} in IG {node.group} updated successfully."
                              if su.phase == "update" else
                              f"Instance {instance_id} in IG {node.group} rolled back successfully to previous AMI.",
                              node.group, instance_id))
        log.info("node %s (%s): software %s -> %s", instance_id, node.group, previous, target)

        def record(c: ClusterRecord) -> ClusterRecord | None:
            if c.software_update is None:
                return None
            done = dict(c.software_update.done)
            if c.software_update.phase == "update":
                done[instance_id] = previous
            return replace(c, software_update=replace(c.software_update, done=done, last_batch_end=self.clock.now()))

        self._update_cluster_with(cluster_id, record)

    def _node_update_failed(self, cluster_id: str, instance_id: str, message: str) -> None:
        node = self.store.get_node(instance_id)
        cluster = self.store.get_cluster(cluster_id)
        if node is None or cluster is None or cluster.software_update is None:
            return
        rollback = cluster.software_update.phase == "rollback"
        data = {k: v for k, v in node.data.items() if k not in ("update_to", "update_step", "wait_started")}
        if rollback:
            data["rollback_failed"] = message
        text = (f"UpdateClusterSoftware rollback failed for instance {instance_id} in IG {node.group}." if rollback
                else f"Instance {instance_id} in IG {node.group} failed to update. Rollback initiated.")
        self._save_node(replace(node, status=InstanceStatus.FAILURE, message=message, data=data),
                        ev.instance_event(text, node.group, instance_id, level=EventLevel.ERROR, failure=message))
        log.warning("node %s: software update failed: %s", instance_id, message)

        def record(c: ClusterRecord) -> ClusterRecord | None:
            if c.software_update is None:
                return None
            failed = {**c.software_update.failed}
            if not rollback:
                failed[instance_id] = message
            su = replace(c.software_update, failed=failed, last_batch_end=self.clock.now())
            return replace(c, software_update=su)

        self._update_cluster_with(cluster_id, record)

    # ---- workers --------------------------------------------------------------------------------

    def _update_cluster_with(self, cluster_id: str, change: Callable[[ClusterRecord], ClusterRecord | None]) -> None:
        for _ in range(20):
            cur = self.store.get_cluster(cluster_id)
            if cur is None:
                return
            new = change(cur)
            if new is None:
                return
            try:
                self.store.update_cluster(new)
                return
            except VersionConflict:
                continue

    def _boot(self, cluster_id: str, instance_id: str) -> None:
        """Runs the node's remaining boot phases, checkpointing each in the store.

        A runtime whose phases are cheap and idempotent (``checkpoint_every_phase = False``: the simulated one)
        has its phase checkpoints coalesced into the next real write; after a crash such phases simply rerun.
        """
        coalesce = not getattr(self.runtime, "checkpoint_every_phase", True)
        node = self.store.get_node(instance_id)
        cluster = self.store.get_cluster(cluster_id)
        dirty = False
        for phase in PHASES:
            if not coalesce:
                node = self.store.get_node(instance_id)
                cluster = self.store.get_cluster(cluster_id)
            if node is None or cluster is None or node.status != InstanceStatus.PENDING:
                return
            if phase in node.phases:
                continue
            if phase == "joined" and node.data.get("resume_on_join"):
                self.runtime.resume(cluster, node, self.store.list_nodes(cluster_id))
                node = self.store.update_node(replace(node, data={
                    k: v for k, v in node.data.items() if k != "resume_on_join"}))
                dirty = False
            if phase == "daemons" and not p.may_start_daemons(  # only a Running controller matters: no full read
                cluster, node.group, [n for n in [self.store.any_node(
                    cluster_id, p.controller_groups(cluster.spec), InstanceStatus.RUNNING)] if n is not None],
                self.runtime.desired_topology(cluster),
            ):
                self._flush(node, dirty)
                return  # waits for the controller / topology; the plan boots it again when they are ready
            try:
                result: dict[str, Any] = dict(  # node_view: read only if the runtime looks at the nodes
                    self.runtime.boot_step(cluster, node, phase, self.store.node_view(cluster_id))
                )
            except NodeBootError as exc:
                self._boot_failed(cluster, node, exc)
                return
            except Exception as exc:
                log.exception("boot of %s failed in phase %s", instance_id, phase)
                self._boot_failed(cluster, node, NodeBootError(f"internal error during {phase}: {exc}"))
                return
            topology = result.pop("applied_topology", None)
            script = result.pop("script", None)
            evs = []
            if script:
                evs.append(self._event(cluster, ev.instance_event(
                    f"Instance lifecycle script execution for EC2 Instance {instance_id} has Completed "
                    f"({script} from {node.lifecycle_digest})", node.group, instance_id)))
            node = replace(node, phases=(*node.phases, phase), **result)
            if coalesce and not evs and not topology and not result:
                dirty = True
            else:
                node = self.store.update_node(node, evs)
                dirty = False
            if topology:
                self._update_cluster_with(cluster_id, functools.partial(_with_topology, topology=str(topology)))
        if not coalesce:
            node = self.store.get_node(instance_id)
            cluster = self.store.get_cluster(cluster_id)
        if node is None or cluster is None or node.status != InstanceStatus.PENDING:
            return
        try:
            self.store.update_node(
                replace(node, status=InstanceStatus.RUNNING, message=None),
                [self._event(cluster, ev.instance_provisioned(cluster.name, node.group, node.instance_id))],
            )
        except VersionConflict:
            return  # changed meanwhile (e.g. being deleted): the next pass plans from the stored record
        log.info("node %s (%s %s): Pending -> Running", instance_id, node.group, node.hostname)

    def _flush(self, node: NodeRecord, dirty: bool) -> None:
        if dirty:
            try:
                self.store.update_node(node)
            except VersionConflict:
                pass

    def _boot_failed(self, cluster: ClusterRecord, node: NodeRecord, exc: NodeBootError) -> None:
        metrics.record_launch_failure(exc)
        if cluster.spec.continuous:
            # Desired state: every failure is retried asynchronously with capped exponential backoff.
            delay = min(MAX_BACKOFF, self.retry_delay * (2 ** min(node.attempts, 8)))
            self.store.update_node(
                replace(node, attempts=node.attempts + 1, next_attempt=self.clock.now() + delay, message=exc.message),
                [self._event(cluster, ev.instance_event(
                    f"Instance launch in Cluster {cluster.name} and IG {node.group} will be retried in "
                    f"{int(delay)} s", node.group, node.instance_id, level=EventLevel.WARN, failure=exc.message))],
            )
            return
        self.store.update_node(
            replace(node, status=InstanceStatus.FAILURE, message=exc.message, attempts=node.attempts + 1),
            [self._event(cluster, ev.instance_failed(cluster.name, node.group, node.instance_id, exc.message))],
        )
        log.info("node %s (%s): Pending -> Failure (%s)", node.instance_id, node.group, exc.message)

    def _remove(self, cluster_id: str, instance_id: str) -> None:
        node = self.store.get_node(instance_id)
        cluster = self.store.get_cluster(cluster_id)
        if node is None or cluster is None:
            return
        self.runtime.remove_node(cluster, node, self.store.node_view(cluster_id))  # read only if looked at
        self.store.delete_node(instance_id)
        log.info("node %s (%s): ShuttingDown -> terminated", instance_id, node.group)

    def _apply_topology(self, cluster_id: str) -> None:
        cluster = self.store.get_cluster(cluster_id)
        if cluster is None:
            return
        try:
            digest = self.runtime.apply_topology(cluster, self.store.list_nodes(cluster_id))
        except TopologyDriftError as exc:
            self._drift_detected(cluster_id, exc)
            return
        self._update_cluster_with(cluster_id, functools.partial(_with_topology, topology=digest))
        self.store.add_events([self._event(cluster, ev.EventDraft(
            ev.ResourceType.CLUSTER, EventLevel.INFO,
            "Slurm was reconfigured successfully. Slurm config updated to match desired state"))])
        log.info("cluster %s: slurm topology applied (%s)", cluster.name, digest[:12])

    def _drift_detected(self, cluster_id: str, exc: TopologyDriftError) -> None:
        """Managed strategy: the update fails and rolls back; nothing on the cluster changes."""
        details = "; ".join(exc.drift)
        message = f"Configuration drift detected. {details}"

        def fail(c: ClusterRecord) -> ClusterRecord | None:
            if c.status != ClusterStatus.UPDATING or c.last_good_spec is None:
                return None
            return replace(c, status=ClusterStatus.ROLLING_BACK, spec=c.last_good_spec, failure_message=message)

        self._update_cluster_with(cluster_id, fail)
        cluster = self.store.get_cluster(cluster_id)
        if cluster is not None:
            self.store.add_events([
                self._event(cluster, ev.EventDraft(ev.ResourceType.CLUSTER, EventLevel.ERROR,
                                                   f"Slurm configuration drift detected: {details}",
                                                   details={"FailureMessage": message})),
                self._event(cluster, ev.cluster_event(cluster.name, "update", "failed", level=EventLevel.ERROR,
                                                      failure=message)),
            ])
        log.warning("cluster %s: %s", cluster_id, message)

    def _finish_delete(self, cluster_id: str) -> None:
        cluster = self.store.get_cluster(cluster_id)
        if cluster is None or cluster.status != ClusterStatus.DELETING:
            return
        if self.store.list_nodes(cluster_id):
            return
        self.runtime.teardown_cluster(cluster)
        self.store.delete_cluster(cluster_id)
        log.info("cluster %s: Deleting -> deleted", cluster.name)
