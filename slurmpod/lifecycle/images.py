"""Images ("AMIs"): a read-only root plus a baseline; releases are published and marked over time.

Two kinds of image:

* ``kind="host"``: the built-in release, this host's installed Debian packages (Slurm 22.05, munge) plus
  slurmpod's baseline; its root is ``/`` (the legacy node model).
* ``kind="rootfs"``: a root filesystem of its own, built with ``slurmpod images build`` (mmdebstrap) or taken
  with ``slurmpod images import``; ``root`` is ``<image store>/<ami-id>/rootfs``, content-addressed and never
  written again (``imagestore`` explains the host-wide store every state dir shares).

``slurmpod images publish`` adds a release whose baseline runs extra setup steps (its own and those of the
release it derives from) on the same root, so a root-volume replacement onto it visibly changes the node.
The catalogue lives in the store's settings (key ``images``) so the CLI and the server share it; rows written
before a field existed load with that field's default, unknown fields are ignored.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from slurmpod.lifecycle.imagestore import PRIMARY_SUITE, ImageStore, Manifest
from slurmpod.lifecycle.nodelayer import RECIPE_VERSION

CURRENT = "Current"
SECURITY_UPDATE_REQUIRED = "SecurityUpdateRequired"
END_OF_LIFE = "EndOfLife"
_KEY = "images"
CATALOG_SETTING = _KEY  # the store setting that holds the catalogue


@dataclass(frozen=True)
class Image:
    image_id: str
    release: str
    root: str  # host path of the read-only root filesystem
    description: str
    setup_script: str = ""  # extra baseline step (bash), run as root in every node of this release
    status: str = CURRENT
    created: float = 0.0
    suite: str = ""  # Debian suite of a rootfs image (bookworm, trixie, ...)
    slurm_version: str = ""  # slurmctld's package version inside the image
    size: int = 0  # bytes on disk of the root filesystem
    digest: str = ""  # "sha256:..." of the tree (rootfs images; the id derives from it)
    kind: str = "host"  # "host": root is this host's / (legacy) | "rootfs": root is the image's own tree

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Image:
        """Tolerant loading of a settings row: missing fields take their defaults, unknown ones are dropped."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    @classmethod
    def from_manifest(cls, m: Manifest, root: Path) -> Image:
        return cls(image_id=m.id, release=m.release, root=str(root), description=m.description, created=m.created,
                   suite=m.suite, slurm_version=m.slurm_version, size=m.size, digest=m.digest, kind="rootfs")


BUILTIN = Image(
    image_id="ami-0e5c1a2b3d4f50617",
    release="1.0.0",
    root="/",
    description="built-in: this host's Debian packages (slurm 22.05, munge) + slurmpod baseline",
    kind="host",
)


class SettingsStore(Protocol):
    def get_setting(self, key: str) -> Any: ...

    def put_setting(self, key: str, value: Any) -> None: ...


class ImageError(ValueError):
    """A bad image request (unknown id, bad release version); the message is user-facing."""


def _bump(release: str) -> str:
    major, minor, patch = (int(x) for x in release.split("."))
    return f"{major}.{minor}.{patch + 1}"


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def check_release(release: str) -> str:
    parts = release.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ImageError(f"Release {release!r} is not a version X.Y.Z.")
    return release


class NodeSource(Protocol):
    def list_clusters(self, account_id: str | None = None) -> list[Any]: ...

    def list_nodes(self, cluster_id: str, groups: Iterable[str] | None = None) -> list[Any]: ...


def image_users(store: NodeSource) -> dict[str, list[str]]:
    """image id -> what uses it: node records (their image, or the source/target of a software update in
    progress) and instance groups whose spec names the image."""
    users: dict[str, list[str]] = {}
    for cluster in store.list_clusters():
        for group in cluster.spec.instance_groups:
            if group.image_id:
                users.setdefault(group.image_id, []).append(f"instance group {cluster.name}/{group.name}")
        for node in store.list_nodes(cluster.cluster_id):
            ids = {node.image_id, (node.data or {}).get("update_to"), (node.data or {}).get("update_from")}
            for image_id in ids - {None, ""}:
                users.setdefault(str(image_id), []).append(f"node {node.instance_id} ({cluster.name})")
    return users


class _Pinned:
    """One read of the catalogue setting, as a read-only settings store."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def get_setting(self, key: str) -> Any:
        return self.raw if key == _KEY else None

    def put_setting(self, key: str, value: Any) -> None:
        raise ImageError("A catalogue snapshot cannot publish images.")


class ImageCatalog:
    def __init__(self, store: SettingsStore) -> None:
        self.store = store
        # the last catalogue read and its images: read on every request, it changes only when an image is published
        self._memo: tuple[Any, tuple[Image, ...]] | None = None

    def releases(self) -> list[Image]:
        raw = self.store.get_setting(_KEY) or []
        memo = self._memo
        if memo is not None and memo[0] == raw:
            return list(memo[1])
        images = [Image.from_dict(r) for r in raw]
        if not any(i.image_id == BUILTIN.image_id for i in images):
            images.insert(0, BUILTIN)
        self._memo = (raw, tuple(images))
        return images

    def latest(self) -> Image:
        return self.releases()[-1]

    def snapshot(self) -> ImageCatalog:
        """The catalogue as read now, for one request: its lookups read the store no more (a DescribeCluster read
        the catalogue once per instance group, a CreateCluster twice)."""
        return self.pinned(self.store.get_setting(_KEY))

    def pinned(self, raw: Any) -> ImageCatalog:
        """``snapshot`` of the catalogue setting's value ``raw`` (``CATALOG_SETTING``) as the caller read it."""
        pinned = ImageCatalog(_Pinned(raw or []))
        pinned._memo = self._memo  # the parse of an unchanged catalogue is reused
        return pinned

    def get(self, image_id: str) -> Image | None:
        return next((i for i in self.releases() if i.image_id == image_id), None)

    def resolve(self, image_id: str | None) -> Image:
        """``None``/``default`` -> the latest release; an unknown id is an ImageError."""
        if image_id in (None, "", "default"):
            return self.latest()
        image = self.get(str(image_id))
        if image is None:
            raise ImageError(f"Image {image_id} not found; `slurmpod images list` shows the releases.")
        return image

    def _save(self, images: list[Image]) -> None:
        self.store.put_setting(_KEY, [asdict(i) for i in images])

    def publish(self, *, base: str | None, script: str, description: str, now: float,
                release: str | None = None) -> Image:
        images = self.releases()
        parent = self.resolve(base)
        version = self.free_release(release)
        parts = [p for p in (parent.setup_script.strip(), script.strip()) if p]
        image = Image(
            image_id="ami-" + secrets.token_hex(9)[:17],
            release=version,
            root=parent.root,
            description=description or f"derived from {parent.image_id} ({parent.release})",
            setup_script="\n".join(parts) + ("\n" if parts else ""),
            created=now,
            suite=parent.suite,
            slurm_version=parent.slurm_version,
            size=parent.size,
            digest=parent.digest,
            kind=parent.kind,
        )
        self._save([*images, image])
        return image

    def next_release(self) -> str:
        return _bump(max((i.release for i in self.releases()), key=_release_key))

    def free_release(self, release: str | None) -> str:
        """``release`` checked (X.Y.Z, not taken), or the next patch release."""
        version = check_release(release) if release else self.next_release()
        if any(i.release == version for i in self.releases()):
            raise ImageError(f"Release {version} already exists.")
        return version

    def register(self, image: Image) -> Image:
        """Adds a rootfs image (from the image store) as a release; the same id again returns the stored one.
        A release already taken (by a concurrent registration) is moved to the next free patch release."""
        existing = self.get(image.image_id)
        if existing is not None:
            return existing
        images = self.releases()
        if any(i.release == image.release for i in images):
            image = Image.from_dict({**asdict(image), "release": self.next_release()})
        self._save([*images, image])
        return image

    def adopt(self, images: ImageStore, image_id: str, state_dir: Path, release: str | None = None) -> Image:
        """Registers an image of the host-wide store (``default``: the store's default (trixie) image of the
        current recipe, the one scripts/install.sh builds; a suite name such as ``trixie``: that suite's default
        image) in this catalogue, and records the reference."""
        suite = PRIMARY_SUITE if image_id == "default" else image_id if not image_id.startswith("ami-") else None
        m = images.default(RECIPE_VERSION, suite) if suite else images.get(image_id)
        if m is None:
            what = "the default image" if image_id == "default" else f"the {suite} default image"
            hint = f" (scripts/install.sh builds {what})" if suite else ""
            raise ImageError(f"Image {image_id} is not in the image store {images.root}{hint}.")
        registered = self.get(m.id)
        if registered is None:  # the manifest's release, or the next free one when this catalogue has it
            version = self.free_release(release) if release else m.release
            image = Image.from_manifest(m, images.rootfs(m.id))
            registered = self.register(Image.from_dict({**asdict(image), "release": version}))
        images.add_ref(m.id, state_dir)
        return registered

    def remove(self, image_id: str, users: Mapping[str, list[str]]) -> Image:
        """Drops an image from the catalogue: refused for the built-in image, for an unknown id, and while
        anything in ``users`` (see ``image_users``) still uses it or a release published from it."""
        if image_id == BUILTIN.image_id:
            raise ImageError(f"Image {image_id} is the built-in image; it cannot be deleted.")
        found = self.get(image_id)
        if found is None:
            raise ImageError(f"Image {image_id} not found; `slurmpod images list` shows the releases.")
        using = users.get(image_id) or []
        if using:
            more = f" and {len(using) - 3} more" if len(using) > 3 else ""
            raise ImageError(f"Image {image_id} is in use by {', '.join(using[:3])}{more}; not deleted.")
        self._save([i for i in self.releases() if i.image_id != image_id])
        return found

    def mark(self, image_id: str, status: str) -> Image:
        images = self.releases()
        found = self.get(image_id)
        if found is None:
            raise ImageError(f"Image {image_id} not found.")
        marked = Image(**{**asdict(found), "status": status})
        self._save([marked if i.image_id == image_id else i for i in images])
        return marked
