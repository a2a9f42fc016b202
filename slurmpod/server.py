"""Composition root: wires settings, store, runtime, reconciler, service and the ASGI app."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request

from slurmpod.api.app import ApiContext, make_app
from slurmpod.clock import SystemClock
from slurmpod.lifecycle.images import BUILTIN, resolve_image
from slurmpod.reconciler.loop import CAPACITY_KEY, Reconciler
from slurmpod.reconciler.runtime import ClusterRuntime
from slurmpod.service.clusters import Caller, ClusterService, Snapshotter
from slurmpod.settings import Settings
from slurmpod.store.sql import SqlStore

log = logging.getLogger("slurmpod.server")


@dataclass
class Server:
    settings: Settings
    store: SqlStore
    runtime: ClusterRuntime
    reconciler: Reconciler
    service: ClusterService
    app: Starlette

    def start(self) -> None:
        self.reconciler.start()

    def stop(self) -> None:
        self.reconciler.stop()
        self.store.close()


def build_runtime(settings: Settings) -> tuple[ClusterRuntime, Snapshotter | None]:
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
    from slurmpod.reconciler.slurm_runtime import build_local_runtime

    return build_local_runtime(settings)


def build_server(settings: Settings) -> Server:
    Path(settings.state_dir).mkdir(parents=True, exist_ok=True)
    store = SqlStore(settings.database_url)
    clock = SystemClock()
    runtime, snapshotter = build_runtime(settings)
    initial_capacity = {**settings.capacity, **settings.simulated_capacity}
    if initial_capacity:
        store.put_setting(CAPACITY_KEY, initial_capacity)
    reconciler = Reconciler(
        store, runtime, clock, interval=settings.reconcile_interval, max_workers=settings.max_parallel_launches,
        image=(BUILTIN.image_id, BUILTIN.release), min_count_timeout=settings.min_count_timeout,
        retry_delay=settings.retry_delay,
    )
    service = ClusterService(
        store, clock, provider_name=settings.provider, strict=settings.compat == "strict",
        wake=reconciler.wake, snapshotter=snapshotter,
        image_resolver=lambda image_id: resolve_image(image_id).image_id,
    )
    caller = Caller(account_id=settings.account_id, region=settings.region)

    def who(_request: Request) -> Caller:
        return caller

    def ready() -> bool:
        try:
            return store.ping() and reconciler.running()
        except Exception:
            return False

    ctx = ApiContext(service=service, caller=who, extensions=settings.compat != "strict", ready=ready)
    return Server(settings, store, runtime, reconciler, service, make_app(ctx))
