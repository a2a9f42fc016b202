"""The host registry of the ``ssh`` provider: pools of existing machines, persisted in one JSON file.

``<state_dir>/ssh/hosts.json`` (0600 in a 0700 directory, atomic replace, every change under an ``flock``
so the CLI and a running server can both edit it) holds one record per host::

    {"name": "root@10.0.0.5:22", "pool": "gpu", "instance_type": "ml.p5.48xlarge", "user": "root",
     "host": "10.0.0.5", "port": 22, "key": "/root/.ssh/id_ed25519", "host_key": "ssh-ed25519 AAAA…",
     "allow_reboot": false, "apt_install": false,
     "cluster_id": "…" | null, "instance_id": "…" | null,     # assigned to an instance, or free
     "ip": "10.0.0.5", "hostname": "node5",                    # recorded at launch
     "quarantine_until": 0.0, "last_error": ""}                # a failing host is skipped for a while

A pool's hosts all have one instance type; the number of hosts of a type is that type's capacity.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from slurmpod.files import JsonFile

#: quarantine_until value of a host that stays out of service until an operator acts (changed host key)
FOREVER = float("inf")
_TARGET_RE = re.compile(r"^(?:(?P<user>[A-Za-z_][A-Za-z0-9_.-]{0,31})@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)"
                        r"(?::(?P<port>[0-9]{1,5}))?$")
_POOL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class PoolError(Exception):
    """A user-facing, one-line registry error (bad target, unknown host, host in use ...)."""


def parse_target(target: str) -> tuple[str, str, int]:
    """``user@host[:port]`` -> (user, host, port); user defaults to root, port to 22."""
    m = _TARGET_RE.match(target.strip())
    if m is None:
        raise PoolError(f"{target!r} is not user@host[:port]")
    port = int(m["port"] or 22)
    if not 0 < port < 65536:
        raise PoolError(f"port {port} out of range")
    return m["user"] or "root", m["host"].strip("[]"), port


def check_pool_name(name: str) -> str:
    if not _POOL_RE.match(name):
        raise PoolError(f"pool name {name!r} must be 1-64 letters, digits, '.', '_' or '-'")
    return name


@dataclass
class HostRecord:
    name: str
    pool: str
    instance_type: str
    user: str
    host: str
    port: int
    key: str
    host_key: str = ""
    allow_reboot: bool = False
    allow_faults: bool = False  # ``slurmpod faults inject`` may break this machine (rehearsals)
    apt_install: bool = False
    cluster_id: str | None = None
    instance_id: str | None = None
    group: str = ""
    ip: str = ""
    hostname: str = ""
    quarantine_until: float = 0.0
    last_error: str = ""
    volumes: list[str] = field(default_factory=list)

    @property
    def free(self) -> bool:
        return self.instance_id is None

    def quarantined(self, now: float) -> bool:
        return self.quarantine_until > now

    @property
    def label(self) -> str:
        return self.name

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostRecord:
        known = {f.name for f in fields(cls)}
        rec = cls(**{k: v for k, v in data.items() if k in known})
        if rec.quarantine_until is None:  # JSON has no infinity: null means "until an operator acts"
            rec.quarantine_until = FOREVER
        return rec

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.quarantine_until == FOREVER:
            data["quarantine_until"] = None
        return data


def host_name(user: str, host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{user}@{shown}:{port}"


class HostPool:
    """The registry file and its lock. Every mutation is read-modify-write under the lock."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = Path(state_dir).resolve() / "ssh"
        self.path = self.dir / "hosts.json"
        self.lock_path = self.dir / "lock"
        self._file = JsonFile(self.path, lock_name=self.lock_path.name, indent=1, sort_keys=True)

    # ---- storage -------------------------------------------------------------------------------

    def _read(self) -> list[HostRecord]:
        return [HostRecord.from_json(h) for h in (self._file.read({}) or {}).get("hosts", [])]

    def _write(self, hosts: list[HostRecord]) -> None:
        self._file.write({"hosts": [h.to_json() for h in hosts]})

    def hosts(self) -> list[HostRecord]:
        """A snapshot of every host (no lock needed: the file is replaced atomically)."""
        return self._read()

    def exists(self) -> bool:
        return bool(self._read())

    def modify(self, change: Callable[[list[HostRecord]], Any]) -> Any:
        """Runs ``change`` on the records under the lock and saves them; returns what ``change`` returns."""
        with self._file.locked():
            hosts = self._read()
            result = change(hosts)
            self._write(hosts)
            return result

    # ---- queries ----------------------------------------------------------------------------------

    def instance_types(self) -> set[str]:
        return {h.instance_type for h in self._read()}

    def find(self, name: str) -> HostRecord | None:
        return next((h for h in self._read() if h.name == name or h.host == name), None)

    def assigned(self, cluster_id: str, instance_id: str) -> HostRecord | None:
        return next((h for h in self._read() if h.cluster_id == cluster_id and h.instance_id == instance_id), None)

    def of_cluster(self, cluster_id: str) -> list[HostRecord]:
        return [h for h in self._read() if h.cluster_id == cluster_id and h.instance_id]

    # ---- changes ----------------------------------------------------------------------------------

    def add(self, rec: HostRecord) -> None:
        def change(hosts: list[HostRecord]) -> None:
            for h in hosts:
                if h.name == rec.name:
                    raise PoolError(f"host {rec.name} is already registered (pool {h.pool}); remove it first")
                if h.pool == rec.pool and h.instance_type != rec.instance_type:
                    raise PoolError(f"pool {rec.pool} holds {h.instance_type} hosts; a pool has one instance type")
            hosts.append(rec)

        self.modify(change)

    def remove(self, name: str, force: bool = False) -> HostRecord:
        def change(hosts: list[HostRecord]) -> HostRecord:
            for i, h in enumerate(hosts):
                if h.name == name or h.host == name:
                    if not h.free and not force:
                        raise PoolError(f"host {h.name} runs instance {h.instance_id} of cluster {h.cluster_id}; "
                                        "delete that node or cluster first")
                    return hosts.pop(i)
            raise PoolError(f"no registered host {name!r}")

        result: HostRecord = self.modify(change)
        return result

    def claim(self, cluster_id: str, instance_id: str, group: str, instance_type: str,
              now: float | None = None) -> tuple[HostRecord | None, list[HostRecord]]:
        """The host of the instance, or a free one of ``instance_type`` now assigned to it.

        Returns (host or None, every host of the type) so a caller can say why none was free.
        """
        now = time.time() if now is None else now

        def change(hosts: list[HostRecord]) -> tuple[HostRecord | None, list[HostRecord]]:
            typed = [h for h in hosts if h.instance_type == instance_type]
            for h in typed:
                if h.cluster_id == cluster_id and h.instance_id == instance_id:
                    return h, typed
            free = [h for h in typed if h.free and not h.quarantined(now)]
            if not free:
                return None, typed
            # hosts that never failed first (in the order they were added), then the one that failed longest ago
            free.sort(key=lambda h: (bool(h.last_error), h.quarantine_until))
            h = free[0]
            h.cluster_id, h.instance_id, h.group = cluster_id, instance_id, group
            return h, typed

        result: tuple[HostRecord | None, list[HostRecord]] = self.modify(change)
        return result

    def update(self, name: str, **values: Any) -> None:
        def change(hosts: list[HostRecord]) -> None:
            for h in hosts:
                if h.name == name:
                    for k, v in values.items():
                        setattr(h, k, v)

        self.modify(change)

    def release(self, name: str, *, error: str = "", quarantine: float = 0.0) -> None:
        """Returns the host to its pool (optionally quarantined for ``quarantine`` seconds, inf = forever)."""
        def change(hosts: list[HostRecord]) -> None:
            for h in hosts:
                if h.name == name:
                    h.cluster_id = h.instance_id = None
                    h.group = ""
                    h.volumes = []
                    if error:
                        h.last_error = error
                        h.quarantine_until = FOREVER if quarantine == FOREVER else time.time() + quarantine
                    else:
                        h.ip = h.hostname = ""

        self.modify(change)

    def known_hosts_file(self, rec: HostRecord) -> Path:
        """An OpenSSH known_hosts file with the pinned key of ``rec`` (for ``ssh`` / ``slurmpod connect``)."""
        path = self.dir / "known_hosts" / rec.name.replace("/", "_")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        entry = rec.host if rec.port == 22 else f"[{rec.host}]:{rec.port}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{entry} {rec.host_key}\n" if rec.host_key else "")
        os.replace(tmp, path)
        return path
