"""Composition root: wires settings, store, runtime, reconciler, service and the ASGI app."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import cast

from slurmpod.api.app import ApiApp, ApiContext, make_app
from slurmpod.api.auth import make_authenticator
from slurmpod.api.contract.model import get_model
from slurmpod.background import Background, InProcess, ReconcilerProcess, serve_parent
from slurmpod.clock import SystemClock
from slurmpod.console import console_routes, credential_sign_in, open_sign_in
from slurmpod.lifecycle.images import BUILTIN, Image, ImageCatalog
from slurmpod.observability import metrics
from slurmpod.reconciler.loop import CAPACITY_KEY, Reconciler
from slurmpod.reconciler.ownership import Ownership
from slurmpod.reconciler.runtime import ClusterRuntime
from slurmpod.reconciler.yielding import ApiGate, YieldingStore
from slurmpod.regions import REGION_SETTING
from slurmpod.security.credentials import CredentialStore
from slurmpod.security.secrets import SecretError, SecretStore
from slurmpod.service.audit import AuditService
from slurmpod.service.clusters import ClusterService, SnapshotInfo, Snapshotter
from slurmpod.settings import Settings
from slurmpod.slurm.accounting import password_problem, username_problem
from slurmpod.store.collector import render as render_metrics
from slurmpod.store.protocol import Store
from slurmpod.store.sql import SqlStore

log = logging.getLogger("slurmpod.server")


@dataclass
class Server:
    settings: Settings
    store: SqlStore
    runtime: ClusterRuntime
    background: Background  # the reconciler, lease keeper and node services: threads here, or a child process
    service: ClusterService
    app: ApiApp
    _stop_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _handed_over: bool = False
    _closed: bool = False

    @property
    def reconciler(self) -> Reconciler:
        """The reconciler, when it runs in this process (``InProcess``)."""
        if not isinstance(self.background, InProcess):
            raise AttributeError("the reconciler runs in a child process (--reconciler process)")
        return self.background.reconciler

    def start(self) -> None:
        self.background.start()

    def hand_over(self) -> None:
        """Stops reconciling and hands this server's clusters to the others at once (not after their leases
        expire); the API may go on answering meanwhile (a graceful SIGTERM drains it in parallel)."""
        with self._stop_lock:
            if self._handed_over:
                return
            self._handed_over = True
            self.background.hand_over()

    def stop(self) -> None:
        self.hand_over()
        with self._stop_lock:
            if not self._closed:
                self._closed = True
                if self.app.ctx.audit is not None:  # the queued audit records, written before the store closes
                    self.app.ctx.audit.close()
                self.store.close()


def confine_file_sources(snapshotter: Snapshotter, state_dir: Path) -> Snapshotter:
    """Refuses ``file://`` lifecycle sources that overlap the state directory (credentials, munge keys,
    the database): a caller could otherwise copy another account's secrets into its own nodes."""
    state = Path(os.path.realpath(state_dir))

    def guarded(uri: str, entry_point: str | None) -> SnapshotInfo:
        parts = urllib.parse.urlsplit(uri)
        if parts.scheme.lower() == "file":
            root = Path(os.path.realpath(urllib.parse.unquote(parts.path) or "/"))
            if root == state or state in root.parents or root in state.parents:
                raise ValueError("file:// lifecycle sources may not read slurmpod's state directory")
        return snapshotter(uri, entry_point)

    return guarded


def database_secret_check(secrets: SecretStore) -> Callable[[str, str], str | None]:
    """The service's check of ``AccountingDatabase.SecretArn``: the secret exists in the caller's account and
    holds a username and a password slurmdbd.conf can carry. Findings never contain the secret's value."""

    def check(arn: str, account_id: str) -> str | None:
        problem = secrets.database_secret_problem(arn, account_id)
        if problem:
            return problem
        try:
            creds = secrets.database_credentials(arn)
        except SecretError as exc:
            return str(exc)
        issue = username_problem(creds.username) or password_problem(creds.password)
        return f"Secret {arn}: {issue}." if issue else None

    return check


def node_image(settings: Settings, catalog: ImageCatalog) -> Image:
    """The image of the local provider's nodes when a group names none, and of accounting hosts: the image store's
    default root filesystem (or ``--node-image AMI``) registered in this state dir's catalogue, or the legacy
    built-in host-root image (``--node-image builtin``). A missing image stops the server with what to do."""
    from slurmpod.lifecycle.images import ImageError
    from slurmpod.lifecycle.imagestore import ImageStore
    from slurmpod.providers.base import SetupError

    choice = settings.node_image or "default"
    if settings.provider == "simulated" or choice == "builtin":
        return BUILTIN
    try:
        registered = catalog.get(choice)
        if registered is not None and registered.kind == "rootfs" and Path(registered.root).is_dir():
            return registered
        return catalog.adopt(ImageStore(), choice, Path(settings.state_dir))
    except ImageError as exc:
        raise SetupError(f"{exc} Build one with `slurmpod images build --default` (scripts/install.sh does), or "
                         "start the server with --node-image builtin (legacy nodes that overlay this host's /)."
                         ) from exc


def build_runtime(settings: Settings, image: Image = BUILTIN) -> tuple[ClusterRuntime, Snapshotter | None]:
    if settings.provider == "simulated":
        from slurmpod.providers.simulated import SimulatedProvider
        from slurmpod.reconciler.simulated import SimulatedRuntime

        provider = SimulatedProvider(
            settings.state_dir,
            capacity=settings.simulated_capacity,
            launch_delay=settings.simulated_launch_delay,
            terminate_delay=settings.simulated_terminate_delay,
            fail_rate=settings.simulated_fail_rate,
            seed=settings.simulated_seed,
        )
        return SimulatedRuntime(provider, BUILTIN.image_id), None
    return build_local_runtime(settings, image)


def build_local_runtime(settings: Settings, image: Image = BUILTIN) -> tuple[ClusterRuntime, Snapshotter]:
    """The default runtime: the local namespace provider, nodes of ``image`` unless their group names another one,
    file/s3/https snapshots."""
    import json

    from slurmpod.domain.legacy import PP_FILE
    from slurmpod.lifecycle.run import resolve_entry_point
    from slurmpod.lifecycle.snapshot import snapshot_source
    from slurmpod.lifecycle.sources import LifecycleSourceError
    from slurmpod.providers.local.hostcheck import check_host
    from slurmpod.providers.ssh.routing import PooledProvider, build_node_provider
    from slurmpod.reconciler.accounting import AccountingService
    from slurmpod.reconciler.slurm_runtime import SlurmRuntime

    state_dir = Path(settings.state_dir)
    check_host(state_dir, settings.local_cidr)
    # ssh host pools (``slurmpod hosts``), when registered, serve their instance types; the rest stays local
    provider = build_node_provider(state_dir, settings.local_cidr)
    secret_store = SecretStore(state_dir)
    # the accounting host is slurmpod's own service host: always on the local provider, never a pool host
    service_provider = provider.local if isinstance(provider, PooledProvider) else provider
    runtime = SlurmRuntime(provider, state_dir, image,
                           accounting=AccountingService(service_provider, state_dir, image=image),
                           internal_accounting=getattr(settings, "accounting", "local") == "local",
                           database_secret=secret_store.database_credentials,
                           remote_type=provider.ssh.handles if isinstance(provider, PooledProvider) else None)

    def snapshotter(uri: str, entry_point: str | None) -> SnapshotInfo:
        try:
            roots = [Path(r) for r in settings.lifecycle_file_roots] or None
            snap = snapshot_source(uri, runtime.snapshots_dir, s3_endpoint_url=settings.s3_endpoint_url,
                                   file_roots=roots)
            if entry_point:
                resolve_entry_point(snap, entry_point)
        except LifecycleSourceError as exc:
            raise ValueError(str(exc)) from exc
        pp_file = snap.path / PP_FILE
        pp = None
        if pp_file.is_file():
            try:
                pp = json.loads(pp_file.read_text())
            except (ValueError, UnicodeDecodeError) as exc:
                raise ValueError(f"{PP_FILE} is not valid JSON: {exc}") from exc
            if not isinstance(pp, dict):
                raise ValueError(f"{PP_FILE} must hold a JSON object")
        return SnapshotInfo(snap.digest, pp)

    return runtime, snapshotter


def build_server(settings: Settings) -> Server:
    """The server of ``settings``: its background work on threads of this process, or (``settings.reconciler ==
    "process"``, a shared database only) in a child process, ``ReconcilerProcess``, started by ``Server.start``."""
    Path(settings.state_dir).mkdir(parents=True, exist_ok=True)
    # the service model (~1 s of JSON parsing), loaded before the first request rather than by the first requests
    # at once (each thread that found the cache empty parsed it: a fresh replica's first answers took seconds)
    get_model()
    store = SqlStore(settings.database_url)
    clock = SystemClock()
    catalog = ImageCatalog(store)
    runtime, snapshotter = build_runtime(settings, node_image(settings, catalog))
    if snapshotter is not None:
        snapshotter = confine_file_sources(snapshotter, Path(settings.state_dir))
    initial_capacity = {**settings.capacity, **settings.simulated_capacity}
    if initial_capacity:
        store.put_setting(CAPACITY_KEY, initial_capacity)
    gate = ApiGate()  # background work in this process waits (briefly) for the API's requests in flight
    background: Background
    if settings.reconciler == "process" and settings.shared_database:
        settings = dataclasses.replace(settings, replica_id=replica_id(settings))  # the child's, across restarts
        background = ReconcilerProcess(reconciler_main, settings, nice=settings.reconciler_nice)
    else:
        background = build_background(settings, store, runtime, clock, catalog, gate)
    service = ClusterService(
        store, clock, provider_name=settings.provider, strict=settings.compat == "strict",
        wake=background.wake, snapshotter=snapshotter, images=catalog,
        secret_check=database_secret_check(SecretStore(Path(settings.state_dir))),
    )

    def ready() -> bool:
        try:
            return store.ping() and background.running()
        except Exception:
            return False

    audit = AuditService(store.audit, clock, retention_days=settings.audit_retention_days, idle=gate.wait)
    audit.maybe_prune()
    store.put_setting(REGION_SETTING, settings.region)  # the default region of the CLI's tools (`slurmpod connect`)
    ctx = ApiContext(service=service, caller=make_authenticator(settings), audit=audit,
                     extensions=settings.compat != "strict", ready=ready,
                     scrape=lambda: render_metrics(store.engine, background.metrics()),
                     ready_detail=background.detail, gate=gate, inline_reads=store.engine.dialect.name == "sqlite")
    sign_in = (open_sign_in(settings.account_id, settings.region) if settings.auth == "none"
               else credential_sign_in(CredentialStore(settings.state_dir), settings.region))
    return Server(settings, store, runtime, background, service, make_app(ctx, console_routes(ctx, sign_in)))


def build_background(settings: Settings, store: SqlStore, runtime: ClusterRuntime, clock: SystemClock,
                     catalog: ImageCatalog, gate: ApiGate | None = None) -> InProcess:
    """The reconciler, and with a shared database the lease keeper, on threads of this process; their store calls
    wait (briefly) for the API's requests in flight through ``gate`` when the API shares the process."""

    def image_of(image_id: str | None) -> Image:
        return (catalog.get(image_id) if image_id else None) or catalog.latest()

    def image_and_release(image_id: str | None) -> tuple[str, str]:
        image = image_of(image_id)  # once: each call reads the catalogue setting
        return image.image_id, image.release

    runtime.set_image_lookup(image_of)
    ownership = build_ownership(settings, store, runtime, clock) if settings.shared_database else None
    fenced = store.fenced(ownership) if ownership is not None else store
    background_store = cast(Store, YieldingStore(fenced, gate) if gate is not None else fenced)
    reconciler = Reconciler(
        background_store, runtime, clock,
        owns=ownership.owns if ownership is not None else (lambda _cid: True),
        interval=settings.reconcile_interval, max_workers=settings.max_parallel_launches,
        image=(BUILTIN.image_id, BUILTIN.release), min_count_timeout=settings.min_count_timeout,
        retry_delay=settings.retry_delay, drain_timeout=settings.update_drain_timeout,
        dhc_busy_timeout=settings.dhc_busy_timeout, dhc_stress_seconds=settings.dhc_stress_seconds,
        image_lookup=image_and_release,
    )
    background = InProcess(reconciler, runtime, ownership)
    if ownership is not None:
        ownership.busy = lambda cid: bool(reconciler.pool.busy_for(cid))

        def owned_changed() -> None:
            reconciler.wake()
            background.node_services("sync_services")  # IMDS listeners follow the leases

        ownership.on_change = owned_changed
    else:
        metrics.OWNED_CLUSTERS.set_function(lambda: len(store.cluster_ids()))
    return background


def reconciler_main(settings: Settings, conn: Connection) -> None:
    """The reconciler process (``ReconcilerProcess``): this server's background work with its own store
    connections, answering the API process over ``conn`` until it is told to stop."""
    from slurmpod.providers.base import SetupError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        store = SqlStore(settings.database_url)
        catalog = ImageCatalog(store)
        runtime, _snapshotter = build_runtime(settings, node_image(settings, catalog))
        background = build_background(settings, store, runtime, SystemClock(), catalog)
        background.start()
    except SetupError as exc:
        conn.send(("failed", str(exc)))
        return
    except Exception as exc:
        log.exception("the reconciler process could not start")
        conn.send(("failed", f"the reconciler process could not start: {exc}"))
        return
    try:
        serve_parent(background, conn, metrics.render_reconciler)
    finally:
        store.close()


def machine_id() -> str:
    """This machine's identity for node reachability: /etc/machine-id, else the host name."""
    import socket

    try:
        value = Path("/etc/machine-id").read_text().strip()
    except OSError:
        value = ""
    return value or socket.gethostname()


def replica_id(settings: Settings) -> str:
    """``--replica-id``, else ``<machine>-<pid>-<random>``."""
    import secrets

    return settings.replica_id or f"{(settings.machine_id or machine_id())[:12]}-{os.getpid()}-{secrets.token_hex(3)}"


def build_ownership(settings: Settings, store: SqlStore, runtime: ClusterRuntime, clock: SystemClock) -> Ownership:
    """The lease keeper of a server sharing its database. A local-provider cluster is pinned to the machine of
    its first owner (its nodes are that machine's namespaces) unless every group runs on ssh host pools;
    simulated clusters are pinned nowhere."""
    from slurmpod.domain.ownership import Candidate

    machine = settings.machine_id or machine_id()
    replica = replica_id(settings)
    remote = getattr(runtime, "remote_type", None)

    def home_of(cluster_id: str) -> str | None:
        if settings.provider == "simulated":
            return None
        cluster = store.get_cluster(cluster_id)
        groups = cluster.spec.instance_groups if cluster is not None else ()
        if callable(remote) and groups and all(remote(g.instance_type or "") for g in groups):
            return None
        return machine

    log.info("replica %s on machine %s: clusters are owned through %.0f s leases in the shared database",
             replica, machine, settings.lease_seconds)
    return Ownership(store.leases, Candidate(replica, machine, settings.provider), clock,
                     lease_seconds=settings.lease_seconds, home_of=home_of)
