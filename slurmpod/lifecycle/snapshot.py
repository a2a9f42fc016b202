"""Content-addressed, read-only snapshots of lifecycle sources.

``snapshot_source`` fetches a source into a temporary directory next to the snapshots, hashes it and
renames it to ``snapshots_dir/<hex>``. The rename is atomic, so a crash leaves either nothing or a
complete snapshot (plus a ``.tmp-*`` directory that a later call removes). Identical content gives
the identical digest and directory, so taking a snapshot is idempotent and every node of an
operation runs the same bytes even if the bucket changes later.

Digest (``sha256:<hex>``): SHA-256 over a version tag followed by, for each file in sorted order of
its relative path, the path, an executable flag, the content length and the content.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpod.lifecycle.sources import (
    DEFAULT_LIMITS,
    LifecycleSourceError,
    S3Options,
    SourceLimits,
    fetch_source,
)

DIGEST_TAG = b"slurmpod-lifecycle-snapshot-v1\0"
TEMP_PREFIX = ".tmp-"
STALE_TEMP_SECONDS = 3600.0


@dataclass(frozen=True)
class Snapshot:
    digest: str  # "sha256:<hex>"
    path: Path  # read-only directory holding the files
    files: tuple[str, ...]  # sorted relative paths (POSIX separators)

    @property
    def hex(self) -> str:
        return self.digest.split(":", 1)[1]

    def is_executable(self, rel: str) -> bool:
        return bool((self.path / rel).stat().st_mode & stat.S_IXUSR)


def _list_files(root: Path) -> tuple[str, ...]:
    out: list[str] = []
    for dirpath, _dirs, filenames in os.walk(root, followlinks=False):
        for f in filenames:
            out.append((Path(dirpath) / f).relative_to(root).as_posix())
    return tuple(sorted(out))


def compute_digest(root: Path, files: tuple[str, ...]) -> str:
    """The ``sha256:<hex>`` digest of ``files`` (relative to ``root``); see the module docstring."""
    h = hashlib.sha256(DIGEST_TAG)
    for rel in sorted(files):
        path = root / rel
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode):
            raise LifecycleSourceError(f"Snapshot entry {rel!r} is not a regular file")
        encoded = rel.encode("utf-8", "surrogateescape")
        h.update(b"%d:" % len(encoded) + encoded)
        h.update(b"x" if st.st_mode & stat.S_IXUSR else b"-")
        h.update(b"%d:" % st.st_size)
        with path.open("rb") as f:
            while chunk := f.read(1 << 16):
                h.update(chunk)
    return "sha256:" + h.hexdigest()


def _make_read_only(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for f in filenames:
            p = Path(dirpath) / f
            p.chmod(0o555 if p.stat().st_mode & stat.S_IXUSR else 0o444)
        for d in dirnames:
            (Path(dirpath) / d).chmod(0o555)
    root.chmod(0o555)


def remove_tree(root: Path) -> None:
    """Removes a (possibly read-only) snapshot or temp directory; missing is fine."""
    if not root.exists():
        return
    for dirpath, dirnames, _files in os.walk(root):
        for d in dirnames:
            with contextlib.suppress(OSError):
                (Path(dirpath) / d).chmod(0o755)
    with contextlib.suppress(OSError):
        root.chmod(0o755)
    shutil.rmtree(root, ignore_errors=True)


def _clean_stale_temps(snapshots_dir: Path) -> None:
    now = time.time()
    for entry in snapshots_dir.glob(TEMP_PREFIX + "*"):
        try:
            if now - entry.stat().st_mtime > STALE_TEMP_SECONDS:
                remove_tree(entry)
        except OSError:
            continue


def load_snapshot(snapshots_dir: Path, digest: str, *, verify: bool = False) -> Snapshot:
    """The snapshot stored under ``digest`` (e.g. after a restart); ``verify`` re-hashes its files.

    Raises ``LifecycleSourceError`` when it is missing or (with ``verify``) corrupted.
    """
    algo, _, hexpart = digest.partition(":")
    if algo != "sha256" or len(hexpart) != 64 or any(c not in "0123456789abcdef" for c in hexpart):
        raise LifecycleSourceError(f"Invalid lifecycle snapshot digest {digest!r}")
    path = snapshots_dir / hexpart
    if not path.is_dir():
        raise LifecycleSourceError(f"Lifecycle snapshot {digest} is missing from {snapshots_dir}")
    files = _list_files(path)
    if verify and compute_digest(path, files) != digest:
        raise LifecycleSourceError(f"Lifecycle snapshot {digest} in {snapshots_dir} is corrupted")
    return Snapshot(digest=digest, path=path, files=files)


def snapshot_source(
    uri: str,
    snapshots_dir: Path,
    *,
    s3_endpoint_url: str | None = None,
    s3: S3Options | None = None,
    s3_client: Any = None,
    limits: SourceLimits = DEFAULT_LIMITS,
    timeout: float = 30.0,
    file_roots: Sequence[Path] | None = None,
) -> Snapshot:
    """Fetches ``uri`` and stores it as a read-only snapshot under ``snapshots_dir/<hex>``.

    ``s3_endpoint_url`` is a shortcut for ``S3Options(endpoint_url=...)`` (e.g. ``Settings.s3_endpoint_url``).
    ``file_roots`` confines ``file://`` sources (see ``fetch_source``). Raises ``LifecycleSourceError``
    for unusable sources.
    """
    if s3 is None:
        s3 = S3Options(endpoint_url=s3_endpoint_url)
    snapshots_dir.mkdir(parents=True, exist_ok=True)
    _clean_stale_temps(snapshots_dir)
    tmp = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=snapshots_dir))
    try:
        fetch_source(
            uri, tmp, s3=s3, s3_client=s3_client, limits=limits, timeout=timeout, file_roots=file_roots
        )
        files = _list_files(tmp)
        digest = compute_digest(tmp, files)
        target = snapshots_dir / digest.split(":", 1)[1]
        if not target.is_dir():
            _make_read_only(tmp)
            try:
                os.rename(tmp, target)
            except OSError:
                if not target.is_dir():  # lost a race to an identical snapshot: fine; anything else: not
                    raise
        return Snapshot(digest=digest, path=target, files=files)
    finally:
        remove_tree(tmp)
