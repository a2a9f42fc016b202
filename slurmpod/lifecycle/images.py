"""Images ("AMIs"): a read-only root plus a baseline; releases are published and marked over time.

The built-in release is this host's installed Debian packages (Slurm 22.05, munge) plus slurmpod's baseline.
``slurmpod images publish`` adds a release whose baseline runs extra setup steps (its own and those of the
release it derives from), so a root-volume replacement onto it visibly changes the node. The catalogue lives
in the store's settings (key ``images``) so the CLI and the server share it.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass
from typing import Any, Protocol

CURRENT = "Current"
SECURITY_UPDATE_REQUIRED = "SecurityUpdateRequired"
END_OF_LIFE = "EndOfLife"
_KEY = "images"


@dataclass(frozen=True)
class Image:
    image_id: str
    release: str
    root: str  # host path of the read-only root filesystem
    description: str
    setup_script: str = ""  # extra baseline step (bash), run as root in every node of this release
    status: str = CURRENT
    created: float = 0.0


BUILTIN = Image(
    image_id="ami-0e5c1a2b3d4f50617",
    release="1.0.0",
    root="/",
    description="built-in: this host's Debian packages (slurm 22.05, munge) + slurmpod baseline",
)


class SettingsStore(Protocol):
    def get_setting(self, key: str) -> Any: ...

    def put_setting(self, key: str, value: Any) -> None: ...


class ImageError(ValueError):
    """A bad image request (unknown id, bad release version); the message is user-facing."""


def _bump(release: str) -> str:
    major, minor, patch = (int(x) for x in release.split("."))
    return f"{major}.{minor}.{patch + 1}"


class ImageCatalog:
    def __init__(self, store: SettingsStore) -> None:
        self.store = store

    def releases(self) -> list[Image]:
        raw = self.store.get_setting(_KEY) or []
        images = [Image(**r) for r in raw]
        if not any(i.image_id == BUILTIN.image_id for i in images):
            images.insert(0, BUILTIN)
        return images

    def latest(self) -> Image:
        return self.releases()[-1]

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
        version = release or _bump(max((i.release for i in images), key=lambda r: tuple(int(x) for x in r.split("."))))
        if any(i.release == version for i in images):
            raise ImageError(f"Release {version} already exists.")
        parts = [p for p in (parent.setup_script.strip(), script.strip()) if p]
        image = Image(
            image_id="ami-" + secrets.token_hex(9)[:17],
            release=version,
            root=parent.root,
            description=description or f"derived from {parent.image_id} ({parent.release})",
            setup_script="\n".join(parts) + ("\n" if parts else ""),
            created=now,
        )
        self._save([*images, image])
        return image

    def mark(self, image_id: str, status: str) -> Image:
        images = self.releases()
        found = self.get(image_id)
        if found is None:
            raise ImageError(f"Image {image_id} not found.")
        marked = Image(**{**asdict(found), "status": status})
        self._save([marked if i.image_id == image_id else i for i in images])
        return marked
