"""Many files into a running host in one command: a tar stream piped into the host's own ``tar``.

Each ``CommandRunner.run`` is a process tree in the host (``nsenter`` for the local provider, an ssh session for
the ssh provider), so a node's baseline that wrote its dozen files one ``install`` + ``mv`` at a time spent most
of its time starting processes. ``write_files`` sends them (and the directories they need, with their modes and
owners) as one archive; the host's GNU tar resolves owner *names* in the host's own passwd/group, replaces an
existing file or symlink instead of writing through it, and sets a directory's mode and owner after its entries.
A directory that exists as a symlink to a directory stays one (``--keep-directory-symlink``, like ``install -d``).

Unlike ``slurm.control.write_file`` (temp file + rename) the files are not replaced atomically: use it for what no
daemon reads while it is written (a node's boot files), not for a live slurm.conf.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Sequence

from slurmpod.providers.base import CommandRunner, NodeFile, ProviderError


class NodeFilesError(ProviderError):
    """The host's tar refused the archive (message holds tar's stderr, never a file's content)."""


def _owner(entry: tarfile.TarInfo, owner: str) -> None:
    user, _, group = owner.partition(":")
    entry.uname, entry.gname = user, group or user
    entry.uid = entry.gid = 0  # tar maps the names; a name the host lacks falls back to root


def archive(files: Sequence[NodeFile], dirs: Sequence[tuple[str, int, str]] = ()) -> bytes:
    """The tar stream: ``dirs`` (``(path, mode, owner)``) first, then ``files``; paths must be absolute."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, mode, owner in dirs:
            entry = tarfile.TarInfo(_relative(path))
            entry.type, entry.mode, entry.mtime = tarfile.DIRTYPE, mode, now
            _owner(entry, owner)
            tar.addfile(entry)
        for f in files:
            entry = tarfile.TarInfo(_relative(f.path))
            entry.mode, entry.mtime = f.mode, now
            _owner(entry, f.owner)
            if f.link is not None:
                entry.type, entry.linkname = tarfile.SYMTYPE, f.link
                tar.addfile(entry)
            else:
                entry.size = len(f.content)
                tar.addfile(entry, io.BytesIO(f.content))
    return buf.getvalue()


def _relative(path: str) -> str:
    if not path.startswith("/") or "/../" in f"{path}/" or "\n" in path:
        raise ValueError(f"node file paths must be absolute and plain, got {path!r}")
    return path.lstrip("/")


def write_files(runner: CommandRunner, files: Sequence[NodeFile], dirs: Sequence[tuple[str, int, str]] = (),
                timeout: float = 60.0) -> None:
    """Writes ``files`` (and ``dirs``) inside the host with one ``tar -x``; raises ``NodeFilesError``."""
    if not files and not dirs:
        return
    # the members are named too: a runner that records what it writes (the ssh provider's) sees them in argv
    members = [_relative(path) for path, _, _ in dirs] + [_relative(f.path) for f in files]
    res = runner.run(["tar", "-x", "-f", "-", "-C", "/", "--same-owner", "--same-permissions", "--no-acls",
                      "--no-xattrs", "--delay-directory-restore", "--keep-directory-symlink", "--no-recursion", "--",
                      *members],
                     input=archive(files, dirs), timeout=timeout)
    if res.returncode != 0:
        raise NodeFilesError(f"writing {len(files)} files in the node failed (tar exit {res.returncode}): "
                             f"{res.stderr.strip()[-400:]}")
