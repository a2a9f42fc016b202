"""The image store: content-addressed, immutable root filesystems shared by every state directory.

Design
------
* One host-wide store, ``/var/lib/slurmpod/images`` (``SLURMPOD_IMAGE_STORE`` or ``--image-store``). With the
  default state dir ``/var/lib/slurmpod`` it is exactly ``<state>/images``; other state dirs (the demo's, each
  test's temporary one) reference the same store, so the default image that ``scripts/install.sh`` builds once is
  reused by every later run instead of being rebuilt.
* Sharing is safe because an image never changes: ``<store>/<ami-id>/`` holds ``rootfs/`` and ``manifest.json``;
  the id is derived from the tree's digest (``rootfs.scan_tree``), both are written once, then the image dir and
  the rootfs top are made 0555 and the manifest 0444. Nodes use the rootfs only as a read-only overlay lower layer.
* A build or import happens in ``<store>/.build-XXXX`` (same filesystem) and is renamed into place atomically; a
  failure or Ctrl-C unmounts whatever is left mounted below it and removes it, so nothing half-made is ever seen.
  A ``.build-*`` dir whose builder died without cleaning up (SIGKILL) is swept by the next build.
* ``defaults/<suite>.json`` names each Debian suite's default image per recipe version
  (``nodelayer.RECIPE_VERSION``); ``PRIMARY_SUITE``'s is the store's default (``--node-image default``). The
  install script builds them only when missing for the current recipe. (``default.json``, the one pointer of
  stores written before per-suite defaults, is still read for its suite and written with the primary one.)
* Which images a state dir offers is its catalogue (``images.ImageCatalog``, in the store's settings), which
  refers to store images by id. Each registration also leaves a reference ``refs/<ami-id>/<key>`` naming the
  state dir; ``images delete`` drops this state dir's entry (refused while its nodes use the image) and removes
  the files only when no other live state dir refers to the image and it is not the store's default.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

DEFAULT_IMAGE_STORE = Path("/var/lib/slurmpod/images")
BUILD_PREFIX = ".build-"
DELETE_PREFIX = ".delete-"
DEFAULT_FILE = "default.json"
#: ``<suite>.json`` pointers: the default image of each Debian suite (``--node-image trixie``)
SUITE_DEFAULTS = "defaults"
#: the suite whose default is the store's default (``default.json``, ``--node-image default``)
PRIMARY_SUITE = "trixie"
_SUITE_OK = re.compile(r"^[a-z][a-z0-9-]{1,30}$")
REFS = "refs"
MANIFEST = "manifest.json"
ROOTFS = "rootfs"


def default_image_store() -> Path:
    return Path(os.environ.get("SLURMPOD_IMAGE_STORE") or DEFAULT_IMAGE_STORE)


class ImageStoreError(RuntimeError):
    """The store cannot do what was asked (an image is missing, mounts are left behind); user-facing."""


@dataclass(frozen=True)
class Manifest:
    id: str
    release: str
    suite: str
    slurm_version: str
    packages: tuple[str, ...]
    size: int
    created: float
    digest: str
    description: str
    kind: str = "rootfs"
    source: str = "build"  # build | import
    recipe: int = 0  # nodelayer.RECIPE_VERSION the node layer was applied with
    files: int = 0
    os: str = ""  # os-release PRETTY_NAME
    systemd_version: str = ""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "packages": list(self.packages)}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Manifest:
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in raw.items() if k in known}
        data["packages"] = tuple(data.get("packages") or ())
        return cls(**data)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` (from /proc/self/mountinfo), deepest first."""
    prefix = os.path.realpath(path).rstrip("/")
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) < 5:
            continue
        mp = parts[4].encode().decode("unicode_escape")  # \040 etc.
        if mp == prefix or mp.startswith(prefix + "/"):
            found.append(mp)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def release_mounts(path: Path) -> None:
    """Unmounts everything below ``path`` (lazily when busy); raises if anything stays mounted."""
    for mp in mounts_under(path):
        done = subprocess.run(["umount", mp], capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", mp], capture_output=True, timeout=60, check=False)
    left = mounts_under(path)
    if left:
        raise ImageStoreError(f"cannot unmount {left[0]}; remove {path} by hand once it is unmounted")


def remove_tree(path: Path) -> None:
    """rm -rf that never descends into a mount (the apt cache bind mount, a chroot's /dev or /proc)."""
    if not os.path.lexists(path):
        return
    release_mounts(path)
    shutil.rmtree(path)


@dataclass
class Staging:
    """A build in progress: ``<store>/.build-XXXX`` with ``rootfs/`` inside."""

    path: Path
    rootfs: Path = field(init=False)

    def __post_init__(self) -> None:
        self.rootfs = self.path / ROOTFS


class ImageStore:
    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_image_store()

    # layout
    def image_dir(self, image_id: str) -> Path:
        if not image_id.startswith("ami-") or "/" in image_id or image_id in ("ami-", "ami-.", "ami-.."):
            raise ImageStoreError(f"not an image id: {image_id!r}")
        return self.root / image_id

    def rootfs(self, image_id: str) -> Path:
        return self.image_dir(image_id) / ROOTFS

    def get(self, image_id: str) -> Manifest | None:
        try:
            raw = json.loads((self.image_dir(image_id) / MANIFEST).read_text())
        except (OSError, ValueError, ImageStoreError):
            return None
        return Manifest.from_dict(raw)

    def manifests(self) -> list[Manifest]:
        if not self.root.is_dir():
            return []
        found = [self.get(p.name) for p in sorted(self.root.iterdir()) if p.name.startswith("ami-") and p.is_dir()]
        return sorted((m for m in found if m is not None), key=lambda m: (m.created, m.id))

    # building
    def sweep(self) -> list[Path]:
        """Removes ``.build-*``/``.delete-*`` dirs whose process is gone (a build killed with SIGKILL)."""
        removed: list[Path] = []
        if not self.root.is_dir():
            return removed
        for p in self.root.iterdir():
            if not p.name.startswith((BUILD_PREFIX, DELETE_PREFIX)):
                continue
            try:
                pid = int((p / "pid").read_text().strip())
            except (OSError, ValueError):
                pid = 0
            if pid and Path(f"/proc/{pid}").exists() and pid != os.getpid():
                continue
            remove_tree(p)
            removed.append(p)
        return removed

    @contextmanager
    def staging(self) -> Iterator[Staging]:
        """A fresh staging dir; removed (mounts released first) unless ``commit`` moved it into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.sweep()
        path = Path(tempfile.mkdtemp(prefix=BUILD_PREFIX, dir=self.root))
        (path / "pid").write_text(f"{os.getpid()}\n")
        stage = Staging(path)
        try:
            yield stage
        finally:
            remove_tree(path)  # after a successful commit the path no longer exists

    def commit(self, stage: Staging, manifest: Manifest) -> Manifest:
        """Moves a finished staging dir into place as ``<store>/<id>`` (atomic rename). An image with the same
        id (same digest) already stored wins: the staging dir is dropped and the stored manifest returned."""
        existing = self.get(manifest.id)
        if existing is not None:
            return existing
        release_mounts(stage.path)
        (stage.path / "pid").unlink(missing_ok=True)
        mpath = stage.path / MANIFEST
        mpath.write_text(manifest.to_json())
        mpath.chmod(0o444)
        stage.rootfs.chmod(0o555)
        target = self.image_dir(manifest.id)
        try:
            os.rename(stage.path, target)
        except OSError as exc:  # e.g. a concurrent build of the same bits won the rename
            if self.get(manifest.id) is not None:
                return self.get(manifest.id) or manifest
            raise ImageStoreError(f"cannot store image {manifest.id}: {exc}") from exc
        target.chmod(0o555)
        return manifest

    def delete(self, image_id: str) -> None:
        target = self.image_dir(image_id)
        if not target.exists():
            raise ImageStoreError(f"image {image_id} is not in the image store {self.root}")
        doomed = Path(tempfile.mkdtemp(prefix=DELETE_PREFIX, dir=self.root))
        os.rename(target, doomed / image_id)  # gone from the store at once; the bytes go next
        remove_tree(doomed)
        shutil.rmtree(self._ref_dir(image_id), ignore_errors=True)
        for pointer in [self.root / DEFAULT_FILE, *(self.root / SUITE_DEFAULTS).glob("*.json")]:
            try:
                if json.loads(pointer.read_text()).get("image_id") == image_id:
                    pointer.unlink(missing_ok=True)
            except (OSError, ValueError, AttributeError):
                continue

    # which state dirs refer to an image
    def _ref_dir(self, image_id: str) -> Path:
        return self.root / REFS / self.image_dir(image_id).name

    def add_ref(self, image_id: str, state_dir: Path) -> None:
        key = str(Path(state_dir).resolve())
        d = self._ref_dir(image_id)
        d.mkdir(parents=True, exist_ok=True)
        (d / hashlib.sha256(key.encode()).hexdigest()[:16]).write_text(key + "\n")

    def drop_ref(self, image_id: str, state_dir: Path) -> None:
        key = str(Path(state_dir).resolve())
        (self._ref_dir(image_id) / hashlib.sha256(key.encode()).hexdigest()[:16]).unlink(missing_ok=True)

    def live_refs(self, image_id: str) -> list[str]:
        """State dirs that registered the image and still exist (references of removed dirs are dropped)."""
        d = self._ref_dir(image_id)
        live = []
        for ref in sorted(d.iterdir()) if d.is_dir() else []:
            key = ref.read_text().strip()
            if key and Path(key).is_dir():
                live.append(key)
            else:
                ref.unlink(missing_ok=True)
        return live

    # the default image (built once by scripts/install.sh), and one default per Debian suite
    def default_pointer(self, suite: str | None = None) -> dict[str, Any]:
        """``suite``'s pointer (without one: ``PRIMARY_SUITE``'s, the store's default), or ``default.json`` when it
        is of that suite and the suite has no pointer of its own (stores written before per-suite defaults)."""
        paths = [self._suite_file(suite or PRIMARY_SUITE), self.root / DEFAULT_FILE]
        suite = suite or PRIMARY_SUITE
        for path in paths:
            try:
                raw = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(raw, dict) and raw.get("suite") == suite:
                return raw
        return {}

    def default(self, recipe: int, suite: str) -> Manifest | None:
        """The store's default image of ``suite`` when it was built with this recipe version."""
        ptr = self.default_pointer(suite)
        if ptr.get("recipe") != recipe or ptr.get("suite") != suite:
            return None
        return self.get(str(ptr.get("image_id", "")))

    def set_default(self, manifest: Manifest, *, primary: bool = True) -> None:
        """Makes ``manifest`` its suite's default; with ``primary`` also the store's default (``default.json``)."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / SUITE_DEFAULTS).mkdir(exist_ok=True)
        text = json.dumps({"image_id": manifest.id, "recipe": manifest.recipe, "suite": manifest.suite,
                           "set": time.time()}, indent=2) + "\n"
        for path in [self._suite_file(manifest.suite)] + ([self.root / DEFAULT_FILE] if primary else []):
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)

    @contextmanager
    def default_lock(self, suite: str) -> Iterator[None]:
        """One ``images build --default`` of ``suite`` at a time (install.sh, a test that builds a missing image):
        the second finds the first's image instead of building it again."""
        path = self._suite_file(suite).with_suffix(".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _suite_file(self, suite: str) -> Path:
        if not _SUITE_OK.match(suite):
            raise ImageStoreError(f"invalid Debian suite name {suite!r}")
        return self.root / SUITE_DEFAULTS / f"{suite}.json"
