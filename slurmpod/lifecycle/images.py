"""Images ("AMIs"): the built-in release is the host's installed Debian packages plus slurmpod's baseline."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Image:
    image_id: str
    release: str
    root: str  # host path of the read-only root filesystem
    description: str


BUILTIN = Image(
    image_id="ami-0e5c1a2b3d4f50617",
    release="1.0.0",
    root="/",
    description="built-in: this host's Debian packages (slurm 22.05, munge) + slurmpod baseline",
)


def resolve_image(image_id: str | None) -> Image:
    """``None``/``default`` -> the latest release; unknown ids fall back to it too (only one release so far)."""
    return BUILTIN
