"""Node logs kept by the control plane, named like HyperPod's CloudWatch streams.

HyperPod ships each node's lifecycle output (``/var/log/provision/provisioning.log``) to the log group
``/aws/sagemaker/Clusters/<ClusterName>/<ClusterID>``, stream ``LifecycleConfig/<group>/<instance-id>``. slurmpod
copies the node's log after every script run into ``<state>/logs/<cluster-id>/<stream>.log``, so it can still be
read (``slurmpod logs``) after the node is gone. Writes are atomic; a stream holds the latest copy of the node's
whole log.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LIFECYCLE = "LifecycleConfig"
DEEP_HEALTH = "DeepHealthCheckResults"


@dataclass(frozen=True)
class Stream:
    name: str  # e.g. LifecycleConfig/compute-group/i-0123456789abcdef0
    path: Path
    size: int
    modified: float


def lifecycle_stream(group: str, instance_id: str) -> str:
    return f"{LIFECYCLE}/{group}/{instance_id}"


def deep_health_stream(instance_id: str) -> str:
    """HyperPod's ``DeepHealthCheckResults/<id>``: the instance's latest deep health check output."""
    return f"{DEEP_HEALTH}/{instance_id}"


class LogStreams:
    def __init__(self, state_dir: Path) -> None:
        self.root = Path(state_dir) / "logs"

    def _path(self, cluster_id: str, stream: str) -> Path:
        parts = stream.split("/")
        if not _PART.match(cluster_id) or not parts or not all(_PART.match(p) for p in parts):
            raise ValueError(f"invalid log stream name {stream!r}")
        return self.root.joinpath(cluster_id, *parts).with_suffix(".log")

    def write(self, cluster_id: str, stream: str, text: str, *, cluster_name: str | None = None) -> None:
        path = self._path(cluster_id, stream)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if cluster_name and _PART.match(cluster_name):
            (self.root / cluster_id / ".cluster-name").write_text(cluster_name)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def streams(self, cluster_id: str) -> list[Stream]:
        base = self.root / cluster_id
        if not _PART.match(cluster_id) or not base.is_dir():
            return []
        out = []
        for p in sorted(base.rglob("*.log")):
            if p.name.startswith("."):
                continue
            st = p.stat()
            out.append(Stream(str(p.relative_to(base).with_suffix("")), p, st.st_size, st.st_mtime))
        return out

    def find(self, name_or_id: str) -> list[str]:
        """Cluster ids whose logs are kept under this id or cluster name (a deleted cluster's too)."""
        if not self.root.is_dir():
            return []
        out = []
        for d in sorted(self.root.iterdir()):
            marker = d / ".cluster-name"
            if d.name == name_or_id or (marker.exists() and marker.read_text().strip() == name_or_id):
                out.append(d.name)
        return out

    def read(self, cluster_id: str, stream: str) -> str:
        path = self._path(cluster_id, stream)
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
