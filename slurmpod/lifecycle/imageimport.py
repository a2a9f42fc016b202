"""``slurmpod images import DIR|TAR``: a root filesystem made elsewhere (``podman export``, a tarball, a tree).

The source is checked before anything is created when it is a directory, and right after extraction when it is
a tar (GNU tar: any compression it detects, numeric owners, xattrs so file capabilities survive). It must look
like a Debian root filesystem with systemd (``rootfs.check_rootfs``) and carry what the node layer needs
(Slurm, munge, sudo, passwd: ``rootfs.missing_node_packages``, named when missing). Then the same node layer,
digest and atomic move into the image store as a build; any failure leaves nothing behind.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from slurmpod.lifecycle.imagebuild import BuildError, Progress, finish, sigterm_interrupts
from slurmpod.lifecycle.imagestore import ImageStore, Manifest
from slurmpod.lifecycle.rootfs import RootfsError, check_rootfs, missing_node_packages

IMPORT_TIMEOUT = 1800.0


def _check(root: Path, source: Path) -> None:
    try:
        check_rootfs(root)
    except RootfsError as exc:
        raise BuildError(f"{source}: {exc}", 2) from exc
    missing = missing_node_packages(root)
    if missing:
        raise BuildError(f"{source}: the image lacks what a Slurm node needs; install {', '.join(missing)} "
                         "in it first", 2)


def _copy(cmd: list[str], what: str) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=IMPORT_TIMEOUT,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise BuildError(f"{what} took longer than {IMPORT_TIMEOUT:.0f} s") from exc
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        raise BuildError(f"{what} failed: {lines[0] if lines else f'exit code {done.returncode}'}", 2)


def import_image(store: ImageStore, source: Path, progress: Progress, *, release: str, description: str = "",
                 ) -> Manifest:
    source = Path(source)
    if source.is_dir():
        if store.root.resolve().is_relative_to(source.resolve()):
            raise BuildError(f"{source}: contains the image store {store.root}; import a copy of the tree", 2)
        _check(source, source)  # before anything is created
    elif not source.is_file():
        raise BuildError(f"{source}: no such file or directory", 2)
    started = time.monotonic()
    with sigterm_interrupts():
        try:
            with store.staging() as stage:
                stage.rootfs.mkdir()
                if source.is_dir():
                    progress(f"copying: {source}")
                    _copy(["cp", "-a", "--one-file-system", "--", f"{source}/.", str(stage.rootfs)],
                          f"copying {source}")
                else:
                    progress(f"extracting: {source}")
                    _copy(["tar", "-x", "-f", str(source), "-C", str(stage.rootfs), "--numeric-owner",
                           "--same-permissions", "--xattrs", "--xattrs-include=*"],
                          f"{source}: not a tar archive of a root filesystem; extracting it")
                    _check(stage.rootfs, source)
                m = finish(store, stage, progress, release=release, source="import",
                           description=description or f"imported from {source.name}")
        except KeyboardInterrupt:
            raise BuildError("interrupted: nothing was stored (the partial import was removed)", 130) from None
    progress(f"done: {m.id} in {time.monotonic() - started:.1f} s")
    return m
