"""Reading a root filesystem tree from the host side: its content digest, size, symlink-safe paths, and
what a node needs in it (os-release, systemd, dpkg's database).

Everything here only reads the tree; nothing runs inside it. Paths inside the tree are resolved with
``resolve_in_root`` so that an absolute symlink (``/lib -> usr/lib``, ``/etc/os-release ->
../usr/lib/os-release``) never leads out to the host's own files.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

_CHUNK = 1 << 20
MAX_SYMLINKS = 40

# binaries a node image must have before slurmpod's node layer can be applied: path -> Debian package
NODE_BINARIES: Mapping[str, str] = {
    "/usr/sbin/slurmd": "slurmd",
    "/usr/sbin/slurmctld": "slurmctld",
    "/usr/bin/sinfo": "slurm-client",
    "/usr/sbin/munged": "munge",
    "/usr/bin/sudo": "sudo",
    "/usr/sbin/visudo": "sudo",
    "/usr/sbin/useradd": "passwd",
    "/usr/sbin/groupadd": "passwd",
}


class RootfsError(ValueError):
    """The tree is not usable as a node image; the message says why (user-facing, one line)."""


@dataclass(frozen=True)
class TreeScan:
    digest: str  # "sha256:<hex>" over paths, types, modes, owners, sizes, contents, link targets, xattrs
    size: int  # bytes on disk (allocated blocks of each inode counted once)
    files: int  # entries below the top directory


def _xattrs(path: str) -> list[tuple[str, bytes]]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return []
    out = []
    for name in sorted(names):
        try:
            out.append((name, os.getxattr(path, name, follow_symlinks=False)))
        except OSError:
            continue
    return out


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        while chunk := os.read(fd, _CHUNK):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def _walk(top: str, rel: bytes = b"") -> Iterator[tuple[bytes, str, os.stat_result]]:
    """(relative path, host path, lstat) of every entry below ``top``, depth first, sorted by name bytes."""
    with os.scandir(top) as it:
        entries = sorted(it, key=lambda e: os.fsencode(e.name))
    for entry in entries:
        name = os.fsencode(entry.name)
        path = rel + b"/" + name
        st = entry.stat(follow_symlinks=False)
        yield path, entry.path, st
        if stat.S_ISDIR(st.st_mode):
            yield from _walk(entry.path, path)


def scan_tree(root: Path) -> TreeScan:
    """The tree's digest and size. Deterministic: entries in byte order of their paths; mtimes are not part of
    it (two builds of the same bits get the same id). Refuses a tree with something mounted inside it."""
    top = os.fspath(root)
    dev = os.lstat(top).st_dev
    h = hashlib.sha256()
    seen: set[int] = set()
    size = files = 0
    for rel, path, st in _walk(top):
        if st.st_dev != dev:
            raise RootfsError(f"{path} is a mount point inside the image tree; unmount it first")
        mode = st.st_mode
        kind = stat.S_IFMT(mode)
        if stat.S_ISREG(mode):
            extra = _file_sha256(path).encode()
        elif stat.S_ISLNK(mode):
            extra = os.fsencode(os.readlink(path))
        elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            extra = f"{os.major(st.st_rdev)},{os.minor(st.st_rdev)}".encode()
        else:
            extra = b""
        record = b"\0".join([
            rel, f"{kind:o} {stat.S_IMODE(mode):o} {st.st_uid} {st.st_gid}".encode(),
            str(st.st_size if stat.S_ISREG(mode) or stat.S_ISLNK(mode) else 0).encode(), extra,
            *(n.encode() + b"=" + v.hex().encode() for n, v in _xattrs(path)),
        ])
        h.update(len(record).to_bytes(8, "big") + record)
        files += 1
        if st.st_ino not in seen:
            seen.add(st.st_ino)
            size += st.st_blocks * 512
    return TreeScan(digest="sha256:" + h.hexdigest(), size=size, files=files)


def image_id_for(digest: str) -> str:
    """``ami-`` + 17 hex digits of the tree digest (EC2's AMI id shape)."""
    hexpart = digest.split(":", 1)[-1]
    if len(hexpart) < 17 or any(c not in "0123456789abcdef" for c in hexpart):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return "ami-" + hexpart[:17]


def resolve_in_root(root: Path, path: str) -> Path | None:
    """Host path of ``path`` as seen from inside ``root``: symlinks are followed with absolute targets taken
    relative to ``root`` and ``..`` never climbs above it. ``None`` on a symlink loop."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            links += 1
            if links > MAX_SYMLINKS:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        resolved.append(part)
    return root.joinpath(*resolved)


def _exists_in(root: Path, path: str) -> bool:
    found = resolve_in_root(root, path)
    return found is not None and found.exists()


def _find_binary(root: Path, path: str) -> bool:
    """``/usr/sbin/x`` also counts as found at ``/sbin/x`` (images without merged /usr)."""
    candidates = [path]
    if path.startswith("/usr/"):
        candidates.append(path[len("/usr"):])
    for c in candidates:
        found = resolve_in_root(root, c)
        if found is not None and found.is_file() and os.access(found, os.X_OK):
            return True
    return False


def parse_os_release(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def os_release(root: Path) -> dict[str, str]:
    for candidate in ("/etc/os-release", "/usr/lib/os-release"):
        found = resolve_in_root(root, candidate)
        if found is not None and found.is_file():
            return parse_os_release(found.read_text(errors="replace"))
    return {}


def dpkg_versions(root: Path, names: tuple[str, ...] | None = None) -> dict[str, str]:
    """Installed packages' versions from the tree's dpkg database (what ``dpkg-query -W`` answers inside it)."""
    status = resolve_in_root(root, "/var/lib/dpkg/status")
    if status is None or not status.is_file():
        return {}
    out: dict[str, str] = {}
    for stanza in status.read_text(errors="replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        name = fields.get("Package")
        if not name or fields.get("Status") != "install ok installed":
            continue
        if names is None or name in names:
            out[name] = fields.get("Version", "")
    return out


def check_rootfs(root: Path) -> None:
    """Raises RootfsError unless ``root`` looks like a Debian root filesystem with systemd."""
    if not root.is_dir():
        raise RootfsError(f"{root} is not a directory")
    missing = []
    osr = os_release(root)
    if not osr:
        missing.append("/etc/os-release")
    if not any(_find_binary(root, p) for p in ("/usr/lib/systemd/systemd", "/lib/systemd/systemd")):
        missing.append("/usr/lib/systemd/systemd")
    if not _exists_in(root, "/etc/passwd"):
        missing.append("/etc/passwd")
    if missing:
        raise RootfsError(f"not a root filesystem with systemd: missing {', '.join(missing)}")
    family = {osr.get("ID", ""), *osr.get("ID_LIKE", "").split()}
    if "debian" not in family:
        raise RootfsError(f"not a Debian-based root filesystem (os-release ID={osr.get('ID', '?')!r})")


def missing_node_packages(root: Path) -> list[str]:
    """Debian packages whose binaries the node layer needs and the tree lacks (sorted, unique)."""
    return sorted({pkg for path, pkg in NODE_BINARIES.items() if not _find_binary(root, path)})
