"""``slurmpod containers import FILE|DIR --name IMAGE:TAG``: an image into the cluster's registry, from the host.

The source is a root filesystem (a directory, a tar of one, a squashfs ``.sqsh``) or an image archive
(``docker save``/``podman save`` output). Debian's podman does the work on the host, in a private storage of its
own (a temporary directory, ``vfs``: nothing is left in the host's ``/var/lib/containers``): ``import`` (or
``load``), then ``push`` to the state dir's registry (``registry.py``: plain HTTP on a cluster bridge). Any
failure is one ``ContainerImportError`` line naming the step; nothing is pushed then.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from slurmpod.node.container_spec import SpecError, is_image_archive, parse_image
from slurmpod.providers.local.registry import ContainerRegistry

PODMAN = "podman"
TIMEOUT = 1800.0
ATTEMPTS = 2  # a step whose podman helper was SIGKILLed is tried once more (_killed)


class ContainerImportError(RuntimeError):
    """Why an import failed, in one line; ``code`` is the CLI's exit code (2: bad input)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def check_name(name: str) -> str:
    """``IMAGE[:TAG]`` as ``--container-image`` names it (no registry: it goes to the cluster's)."""
    try:
        ref = parse_image(name)
    except SpecError as exc:
        raise ContainerImportError(str(exc).replace("--container-image", "--name"), 2) from exc
    if ref.path or ref.registry or ref.digest:
        raise ContainerImportError(f"--name {name!r}: give IMAGE[:TAG] (it goes to the cluster's registry)", 2)
    return f"{ref.name}:{ref.tag}"


def is_archive(path: Path) -> bool:
    """A ``docker save``/OCI archive rather than a root fs tar (``container_spec.is_image_archive``)."""
    try:
        return is_image_archive(str(path))
    except (OSError, tarfile.TarError) as exc:
        raise ContainerImportError(f"{path} is not a readable tar file ({exc})", 2) from exc


class _Podman:
    def __init__(self, root: Path) -> None:
        self.base = [PODMAN, "--root", str(root / "storage"), "--runroot", str(root / "run"),
                     "--storage-driver", "vfs", "--tmpdir", str(root / "tmp")]
        (root / "tmp").mkdir()

    def run(self, *args: str, stdin: int | None = subprocess.DEVNULL, what: str) -> str:
        try:
            r = subprocess.run([*self.base, *args], stdin=stdin, capture_output=True, text=True,  # noqa: S603
                               timeout=TIMEOUT)
        except FileNotFoundError as exc:
            raise ContainerImportError("podman is not installed on this host (apt-get install podman)") from exc
        except subprocess.TimeoutExpired as exc:
            raise ContainerImportError(f"{what}: podman did not finish within {TIMEOUT:.0f}s") from exc
        if r.returncode != 0:
            lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
            raise ContainerImportError(f"{what} failed: {(lines[-1] if lines else '?').removeprefix('Error: ')}")
        return r.stdout.strip()


@contextlib.contextmanager
def _rootfs_tar(source: Path, work: Path) -> Iterator[Path]:
    """A tar file of the root filesystem ``source`` (a directory or a squashfs image)."""
    tree = source
    if source.is_file():  # squashfs
        tree = work / "sqsh"
        try:
            r = subprocess.run(["unsquashfs", "-no-progress", "-quiet", "-d", str(tree), str(source)],  # noqa: S603, S607
                               capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        except FileNotFoundError as exc:
            raise ContainerImportError("unsquashfs is not installed on this host (apt-get install "
                                       "squashfs-tools)") from exc
        if r.returncode != 0:
            raise ContainerImportError(f"{source} is not a squashfs image: {r.stderr.strip()[-300:]}", 2)
    out = work / "rootfs.tar"
    r = subprocess.run(["tar", "--numeric-owner", "-C", str(tree), "-cf", str(out), "."],  # noqa: S603, S607
                       capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise ContainerImportError(f"packing {source} failed: {r.stderr.strip()[-300:]}")
    yield out


def import_image(state_dir: Path, source: Path, name: str, *, progress: object = print) -> str:
    """Pushes ``source`` as ``name`` to the state dir's registry; returns the reference nodes pull."""
    tag = check_name(name)
    if not source.exists():
        raise ContainerImportError(f"{source}: no such file or directory", 2)
    where = ContainerRegistry(state_dir).address()
    if where is None:
        raise ContainerImportError(f"the container registry of {state_dir} is not running (it runs with the "
                                   "server once a cluster exists)")
    full = f"{where}/{tag}"
    say = progress if callable(progress) else print
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _import_once(source, full, where, say)
            break
        except ContainerImportError as exc:
            if attempt == ATTEMPTS or not _killed(exc):
                raise
            say(f"== {exc}; trying again from a fresh storage (attempt {attempt + 1} of {ATTEMPTS})")
    return full


def _killed(exc: ContainerImportError) -> bool:
    """podman's helper (its re-exec'd layer untar) ended by SIGKILL from outside: a known, rare podman flake
    (containers/podman#17918, no resource pressure, nothing in the kernel log), not a fault of the source."""
    return "signal: killed" in str(exc)


def _import_once(source: Path, full: str, where: str, say: Callable[[str], object]) -> None:
    work = Path(tempfile.mkdtemp(prefix="slurmpod-cimport-", dir="/var/tmp"))
    try:
        pm = _Podman(work)
        if source.is_file() and source.suffix != ".sqsh" and source.suffix != ".squashfs" and is_archive(source):
            say(f"== loading the archive {source}")
            loaded = pm.run("load", "--quiet", "--input", str(source), what=f"loading {source}")
            ref = loaded.splitlines()[-1].split(":", 1)[-1].strip() if loaded else ""
            if not ref:
                raise ContainerImportError(f"{source} holds no image")
            pm.run("tag", ref, full, what="tagging")
        elif source.is_file() and source.suffix not in (".sqsh", ".squashfs"):
            say(f"== importing the root filesystem tar {source}")
            pm.run("import", "--quiet", str(source), full, what=f"importing {source}")
        else:
            with _rootfs_tar(source, work) as tar:
                say(f"== importing the root filesystem {source}")
                pm.run("import", "--quiet", str(tar), full, what=f"importing {source}")
        say(f"== pushing {full}")
        pm.run("push", "--quiet", "--tls-verify=false", full, what=f"pushing to {where}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
