"""Private files on the state directory: owner-only (0600) files in owner-only (0700) directories.

* ``write_atomic`` replaces a file atomically and durably: a uniquely named temp file (``O_EXCL``, never
  following a symlink) is written, fsynced, renamed over the target, then the directory is fsynced, so a
  crash leaves either the old content or the new one, never a torn file.
* ``flocked`` holds an exclusive ``flock`` on a lock file, so concurrent processes (the CLI and a running
  server) serialise their read-modify-write cycles.
* ``JsonFile`` combines both for one JSON document (the credential file, the ssh host registry).
* ``secret_file`` creates a per-cluster key or password once (munge key, accounting DB password).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["JsonFile", "flocked", "private_dir", "secret_file", "write_atomic"]


def private_dir(path: Path) -> Path:
    """``path`` (and its missing parents) created, and ``path`` itself set to mode 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


@contextmanager
def flocked(lock_path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``lock_path`` (created 0600) for the duration of the block."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _fsync_dir(directory: Path) -> None:
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replaces ``path`` with ``data`` (mode 0600): temp file + fsync + rename + directory fsync."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class JsonFile:
    """One JSON document in a 0600 file inside a 0700 directory, changed only under an exclusive ``flock``.

    Readers need no lock (the file is only ever replaced atomically); writers run their read-modify-write
    inside ``locked()``::

        with doc.locked():
            data = doc.read({})
            data["x"] = 1
            doc.write(data)
    """

    def __init__(self, path: Path, *, lock_name: str = ".lock", indent: int | None = 1,
                 sort_keys: bool = False) -> None:
        self.path = Path(path)
        self.lock_path = self.path.parent / lock_name
        self.indent = indent
        self.sort_keys = sort_keys

    def read(self, default: Any = None) -> Any:
        """The parsed document; ``default`` when the file does not exist or is empty."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return default
        return json.loads(raw) if raw.strip() else default

    def write(self, doc: Any) -> None:
        """Replaces the document atomically (call it inside ``locked()``)."""
        write_atomic(self.path, json.dumps(doc, indent=self.indent, sort_keys=self.sort_keys).encode())

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Creates the 0700 directory and holds the document's exclusive lock for the block."""
        private_dir(self.path.parent)
        with flocked(self.lock_path):
            yield


def secret_file(path: Path, make: Callable[[], bytes]) -> bytes:
    """The content of ``path``, created once from ``make()`` (mode 0600, atomic and fsynced): per-cluster keys
    and passwords. Callers serialise concurrent first calls for the same path."""
    if not path.exists():
        write_atomic(path, make())
    return path.read_bytes()
