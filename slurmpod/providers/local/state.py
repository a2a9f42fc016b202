"""Persistent state of the local provider: JSON files, a file lock, instance records, hosts files."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``: serialises processes *and* threads (each call opens anew)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def write_json(path: Path, value: Any) -> None:
    """Atomic replace (never use this for bind-mounted files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
    os.replace(tmp, path)


@dataclass
class InstanceRecord:
    """What the provider remembers about one instance (``meta.json``)."""

    cluster_id: str
    instance_id: str
    group: str
    instance_type: str
    image_id: str
    image_root: str
    volumes: list[list[str]]
    ip: str
    hostname: str
    netns: str
    veth: str
    # Current boot; empty while launching or when stopped.
    holder_pid: int = 0
    holder_start: str = ""
    unshare_pid: int = 0
    unshare_start: str = ""
    netns_inode: int = 0
    mntns: str = ""
    boots: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)  # InstanceRequest.metadata (IMDS: region, ...)
    devices: list[str] = field(default_factory=list)  # InstanceRequest.devices: emulated in the node's /dev

    @classmethod
    def load(cls, path: Path) -> InstanceRecord | None:
        data = read_json(path, None)
        if data is None:
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def save(self, path: Path) -> None:
        write_json(path, asdict(self))


def rewrite_hosts(path: Path, entries: dict[str, str]) -> None:
    """Writes ``ip hostname`` lines *in place*: nodes bind-mount this inode (a rename would detach them)."""
    header = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
    body = "".join(f"{ip} {name}\n" for ip, name in sorted(entries.items(), key=lambda kv: _ip_key(kv[0])))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, (header + body).encode())
    finally:
        os.close(fd)


def _ip_key(ip: str) -> tuple[int, ...]:
    return tuple(int(p) for p in ip.split("."))
