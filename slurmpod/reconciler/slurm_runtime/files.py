"""Per-cluster files on the server: the munge key, the cluster's SSH key pair, the slurm.conf last written."""

from __future__ import annotations

import secrets
import subprocess
import threading
from pathlib import Path

from slurmpod.files import secret_file, write_atomic


class ClusterFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()  # nodes boot in parallel; per-cluster secrets are made once

    def cluster_dir(self, cluster_id: str) -> Path:
        d = self.root / cluster_id
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return d

    def munge_key(self, cluster_id: str) -> bytes:
        with self._lock:
            return secret_file(self.cluster_dir(cluster_id) / "munge.key", lambda: secrets.token_bytes(1024))

    def ssh_key(self, cluster_id: str) -> tuple[bytes, bytes]:
        with self._lock:
            key = self.cluster_dir(cluster_id) / "id_ed25519"
            if not key.exists():
                for p in (key, key.with_suffix(".pub")):
                    p.unlink(missing_ok=True)
                subprocess.run(  # noqa: S603
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"slurmpod-{cluster_id}", "-f", str(key)],
                    check=True, timeout=30, capture_output=True,
                )
            return key.read_bytes(), key.with_suffix(".pub").read_bytes()

    def save_conf(self, cluster_id: str, conf: str) -> None:
        """Atomic and durable (``write_atomic``: a temp file of its own per writer, so the controllers of a cluster
        saving at once each replace the file whole; one shared temp name raced)."""
        write_atomic(self.cluster_dir(cluster_id) / "slurm.conf", conf.encode())

    def saved_conf(self, cluster_id: str) -> str | None:
        path = self.root / cluster_id / "slurm.conf"
        return path.read_text() if path.exists() else None
