"""The pure parts of ``srun --container-*`` (Pyxis's syntax): mount specs, image URIs, the image's environment.

Standard library only: it runs inside nodes (``slurmpod-container``) and in slurmpod's own CLI
(``slurmpod containers import`` names images the same way).
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass

#: the registry a node resolves registry-less images against (written at boot, ``IP:PORT``)
REGISTRY_FILE = "/etc/slurmpod/registry"
REGISTRY_PORT = 5000
IMAGE_FILE_SUFFIXES = (".sqsh", ".squashfs", ".tar", ".tar.gz", ".tgz")
_NAME_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_REGISTRY_RE = re.compile(r"^[A-Za-z0-9.-]+(?::[0-9]{1,5})?$")
_CONTAINER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(ValueError):
    """A malformed option value; the message names the option and the bad part."""


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    readonly: bool = False


@dataclass(frozen=True)
class ImageRef:
    """An image in a registry (``registry`` None: the cluster's) or an image file on the node (``path``)."""

    name: str = ""
    tag: str = "latest"
    digest: str = ""
    registry: str | None = None
    path: str = ""

    def reference(self, default_registry: str) -> str:
        """The full ``REGISTRY/NAME:TAG`` (or ``@sha256:...``) podman pulls."""
        where = self.registry or default_registry
        return f"{where}/{self.name}" + (f"@{self.digest}" if self.digest else f":{self.tag}")


def parse_mounts(spec: str) -> list[Mount]:
    """``SRC:DST[:ro|rw],...`` (Pyxis's ``--container-mounts``; a lone ``SRC`` mounts at the same path)."""
    mounts: list[Mount] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            raise SpecError(f"--container-mounts: empty entry in {spec!r}")
        parts = item.split(":")
        if len(parts) > 3:
            raise SpecError(f"--container-mounts: {item!r} is not SRC:DST[:ro] (too many ':')")
        src = parts[0]
        dst = parts[1] if len(parts) > 1 else src
        flags = parts[2] if len(parts) > 2 else "rw"
        if flags not in ("ro", "rw"):
            raise SpecError(f"--container-mounts: {item!r}: unknown flag {flags!r} (ro or rw)")
        for what, path in (("source", src), ("destination", dst)):
            if not path.startswith("/"):
                raise SpecError(f"--container-mounts: {item!r}: the {what} {path!r} is not an absolute path")
            if "/../" in f"{path}/" or "\n" in path:
                raise SpecError(f"--container-mounts: {item!r}: the {what} {path!r} may not contain '..'")
        if dst == "/":
            raise SpecError(f"--container-mounts: {item!r}: cannot mount over the container's /")
        mounts.append(Mount(src.rstrip("/") or "/", dst.rstrip("/"), flags == "ro"))
    return mounts


def is_image_file(uri: str) -> bool:
    return uri.startswith(("/", "./")) or uri.endswith(IMAGE_FILE_SUFFIXES)


def parse_image(uri: str) -> ImageRef:
    """``[USER@][REGISTRY#]IMAGE[:TAG|@DIGEST]`` (enroot's syntax) or an image file path (``.sqsh``, ``.tar``)."""
    uri = uri.strip()
    if not uri:
        raise SpecError("--container-image: empty image name")
    if is_image_file(uri):
        if not uri.startswith("/"):
            raise SpecError(f"--container-image: image file {uri!r} must be an absolute path")
        if not uri.endswith(IMAGE_FILE_SUFFIXES):
            raise SpecError(f"--container-image: {uri!r}: an image file ends in {', '.join(IMAGE_FILE_SUFFIXES)}")
        return ImageRef(path=uri)
    # enroot's USER@ before REGISTRY# (credentials): ignored; a lone IMAGE@sha256:... is a digest
    rest = uri.split("@", 1)[1] if "#" in uri and "@" in uri.split("#", 1)[0] else uri
    registry: str | None = None
    if "#" in rest:
        registry, rest = rest.split("#", 1)
        if not _REGISTRY_RE.match(registry):
            raise SpecError(f"--container-image: {uri!r}: bad registry {registry!r}")
    digest = ""
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise SpecError(f"--container-image: {uri!r}: bad digest {digest!r}")
    name, tag = rest, "latest"
    if ":" in rest.rsplit("/", 1)[-1]:
        name, tag = rest.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise SpecError(f"--container-image: {uri!r}: bad tag {tag!r}")
    if not _NAME_RE.match(name):
        raise SpecError(f"--container-image: {uri!r}: bad image name {name!r} (lowercase letters, digits, . _ - /)")
    return ImageRef(name=name, tag=tag, digest=digest, registry=registry)


def check_container_name(name: str) -> str:
    if not _CONTAINER_NAME_RE.match(name):
        raise SpecError(f"--container-name: bad name {name!r} (letters, digits, . _ -; at most 64)")
    return name


def parse_env_names(spec: str) -> list[str]:
    """``--container-env=NAME[,NAME...]``."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if not _ENV_NAME_RE.match(n)]
    if bad:
        raise SpecError(f"--container-env: bad variable name {bad[0]!r}")
    return names


def image_env(env: list[str], keep: list[str]) -> list[tuple[str, str]]:
    """The image's ``NAME=VALUE`` settings a task gets over the job's (Pyxis: the image's values win, except for
    the variables named by ``--container-env``, and a job's ``SLURM_*`` are never overridden)."""
    out: list[tuple[str, str]] = []
    for item in env:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME_RE.match(name) or name in keep or name.startswith("SLURM_") or "\n" in value:
            continue
        out.append((name, value))
    return out


def is_image_archive(path: str) -> bool:
    """A ``docker save``/``podman save``/OCI archive (``manifest.json`` or ``oci-layout`` at its top), not a root
    filesystem tar. OSError / tarfile.TarError for what is no readable tar file (callers word the message)."""
    with tarfile.open(path) as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if name in ("manifest.json", "oci-layout"):
                return True
            if "/" in name.rstrip("/") or member.isdir():
                return False
    return False
