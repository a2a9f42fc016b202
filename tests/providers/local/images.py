"""The image store's default root filesystem, for provider tests that boot a systemd node (None if not built)."""

from __future__ import annotations

import json
import os
from pathlib import Path

STORE = Path(os.environ.get("SLURMPOD_IMAGE_STORE", "/var/lib/slurmpod/images"))


def default_root() -> Path | None:
    try:
        image_id = json.loads((STORE / "default.json").read_text())["image_id"]
    except (OSError, ValueError, KeyError):
        return None
    root = STORE / image_id / "rootfs"
    return root if root.is_dir() else None
