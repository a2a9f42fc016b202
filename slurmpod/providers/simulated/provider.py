"""The simulated provider: launch/terminate with configurable delays, a capacity table and seeded failures.

Instances are kept in memory and in an append-only journal (``<state>/simulated/journal``) so a restarted
server re-adopts them and tests can prove nothing was launched twice (``launch_counts``).
"""

from __future__ import annotations

import ipaddress
import os
import random
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from slurmpod.ids import hostname_for_ip
from slurmpod.providers.base import (
    CommandResult,
    InstanceRequest,
    InsufficientCapacity,
    PermanentProviderError,
    ProviderInstance,
)


class SimulatedRunner:
    """Runs nothing; answers every command with success (labelled)."""

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        return CommandResult(0, "", "")

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        return ["echo", "simulated instance: no shell available"]


class SimulatedProvider:
    name = "simulated"

    def __init__(
        self,
        state_dir: Path,
        *,
        capacity: Mapping[str, int] | None = None,
        launch_delay: float = 0.0,
        terminate_delay: float = 0.0,
        fail_rate: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.dir = state_dir / "simulated"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.journal = self.dir / "journal"
        self.capacity = dict(capacity or {})
        self.launch_delay = launch_delay
        self.terminate_delay = terminate_delay
        self.fail_rate = fail_rate
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._defer = threading.local()  # .on: this thread's fsyncs wait for the end of ``deferred_sync``
        self.instances: dict[str, ProviderInstance] = {}
        # cluster id -> its instance ids in launch order: list_instances (the health monitor asks per cluster) read
        # every instance of every cluster, 500 clusters x 20,000 instances per health round at scale
        self._of_cluster: dict[str, dict[str, None]] = {}
        self.types: dict[str, str] = {}
        self.launch_counts: dict[str, int] = {}
        self._launching: dict[str, str] = {}
        self._next_ip = int(ipaddress.IPv4Address("10.200.0.10"))
        self._journal_file: IO[str] | None = None
        self._load()

    def _load(self) -> None:
        if not self.journal.exists():
            return
        for line in self.journal.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "launch":
                _, cid, iid, group, ip, itype = parts[:6]
                self._add(ProviderInstance(cid, iid, group, ip, hostname_for_ip(ip), True))
                self.types[iid] = itype
                self.launch_counts[iid] = self.launch_counts.get(iid, 0) + 1
                self._next_ip = max(self._next_ip, int(ipaddress.IPv4Address(ip)) + 1)
            elif len(parts) >= 2 and parts[0] == "terminate":
                self._drop(parts[1])

    def _add(self, inst: ProviderInstance) -> None:
        self.instances[inst.instance_id] = inst
        self._of_cluster.setdefault(inst.cluster_id, {})[inst.instance_id] = None

    def _drop(self, instance_id: str) -> ProviderInstance | None:
        inst = self.instances.pop(instance_id, None)
        if inst is not None:
            ids = self._of_cluster.get(inst.cluster_id, {})
            ids.pop(instance_id, None)
            if not ids:
                self._of_cluster.pop(inst.cluster_id, None)
        return inst

    def _append(self, line: str) -> None:
        """Written under ``_lock`` (the caller holds it); the file stays open between calls. Durable only
        after ``_sync()``, which callers run once they released the lock (concurrent fsyncs share the work)."""
        if self._journal_file is None or self._journal_file.closed:
            self._journal_file = self.journal.open("a")
        self._journal_file.write(line + "\n")
        self._journal_file.flush()

    @contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Launches and terminations of this thread inside the block journal without an fsync each; one fsync
        when the block ends makes them all durable (before the caller records any of them: a batch of launches
        costs one fsync, not one per instance)."""
        outer = getattr(self._defer, "on", False)
        self._defer.on = True
        try:
            yield
        finally:
            self._defer.on = outer
            if not outer:
                self._sync()

    def _sync(self) -> None:
        if getattr(self._defer, "on", False):
            return
        f = self._journal_file
        if f is not None and not f.closed:
            os.fsync(f.fileno())

    def set_capacity(self, table: Mapping[str, int]) -> None:
        """Replaces the capacity table; takes effect for the next launch."""
        self.capacity = dict(table)

    def prepare_cluster(self, cluster_id: str) -> None:
        return None

    def launch(self, request: InstanceRequest) -> ProviderInstance:
        with self._lock:
            existing = self.instances.get(request.instance_id)
            if existing is not None:
                return existing
            limit = self.capacity.get(request.instance_type)
            if limit is not None:
                used = sum(1 for i, t in self.types.items() if t == request.instance_type and i in self.instances)
                used += sum(1 for t in self._launching.values() if t == request.instance_type)
                if used >= limit:
                    raise InsufficientCapacity(request.instance_type)
            fail = self.fail_rate > 0 and self._rng.random() < self.fail_rate
            self._launching[request.instance_id] = request.instance_type  # reserve capacity while launching
        try:
            if self.launch_delay:
                time.sleep(self.launch_delay)
            if fail:
                raise PermanentProviderError("simulated launch failure (injected)")
        finally:
            with self._lock:
                self._launching.pop(request.instance_id, None)
        with self._lock:
            ip = str(ipaddress.IPv4Address(self._next_ip))
            self._next_ip += 1
            r = request
            inst = ProviderInstance(r.cluster_id, r.instance_id, r.group, ip, hostname_for_ip(ip), True)
            self._append(f"launch {r.cluster_id} {r.instance_id} {r.group} {ip} {r.instance_type}")
            self._add(inst)
            self.types[request.instance_id] = request.instance_type
            self.launch_counts[request.instance_id] = self.launch_counts.get(request.instance_id, 0) + 1
        self._sync()  # durable before the instance is handed out, outside the lock
        return inst

    def terminate(self, cluster_id: str, instance_id: str) -> None:
        if self.terminate_delay:
            time.sleep(self.terminate_delay)
        with self._lock:
            if self._drop(instance_id) is not None:
                self._append(f"terminate {instance_id}")
        self._sync()

    def reboot(self, cluster_id: str, instance_id: str) -> ProviderInstance:
        return self.instances[instance_id]

    def replace_root_volume(self, request: InstanceRequest) -> ProviderInstance:
        return self.instances[request.instance_id]

    def list_instances(self, cluster_id: str) -> list[ProviderInstance]:
        with self._lock:
            return [self.instances[i] for i in self._of_cluster.get(cluster_id, ())]

    def cancel_commands(self, cluster_id: str, instance_id: str) -> int:
        return 0  # simulated commands return at once

    def runner(self, cluster_id: str, instance_id: str) -> SimulatedRunner:
        return SimulatedRunner()

    def teardown_cluster(self, cluster_id: str) -> None:
        for inst in self.list_instances(cluster_id):
            self.terminate(cluster_id, inst.instance_id)

    def revive(self, instance_id: str) -> None:
        """A reboot brings a killed simulated instance back."""
        with self._lock:
            inst = self.instances.get(instance_id)
            if inst is not None and not inst.alive:
                self.instances[instance_id] = ProviderInstance(
                    inst.cluster_id, inst.instance_id, inst.group, inst.ip, inst.hostname, True
                )

    def kill(self, instance_id: str) -> None:
        """Test hook: the instance dies (alive=False) without slurmpod doing it."""
        with self._lock:
            inst = self.instances.get(instance_id)
            if inst is not None:
                self.instances[instance_id] = ProviderInstance(
                    inst.cluster_id, inst.instance_id, inst.group, inst.ip, inst.hostname, False
                )
