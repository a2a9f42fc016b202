"""A new volume made as a copy of a directory of the node's image (``VolumeMount.seed``), on the host, before the
node boots: the accounting host's MariaDB datadir starts from the image's template without a copy inside the
booting node, on MariaDB's critical path (~0.1 s on an idle host, 0.3 s and more while the cluster's other nodes
boot too)."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from slurmpod.providers.base import SEEDED_MARKER
from slurmpod.providers.local.commands import host_run

SEED_TIMEOUT = 300.0


def seed_volume(volume: Path, image_root: str, seed: str) -> bool:
    """``volume``, absent, becomes a whole copy of ``seed`` (a path in the image at ``image_root``) with
    ``SEEDED_MARKER`` in it, or stays absent: the copy is made beside it and renamed into place. False (nothing
    done) when the volume exists or the image has no such directory."""
    source = Path(image_root) / seed.lstrip("/")
    if volume.exists() or not source.is_dir() or source.is_symlink():
        return False
    volume.parent.mkdir(parents=True, exist_ok=True)
    partial = volume.with_name(f".{volume.name}.seeding-{secrets.token_hex(4)}")
    try:
        host_run(["cp", "-a", "--sparse=always", "--", str(source), str(partial)], timeout=SEED_TIMEOUT)
        (partial / SEEDED_MARKER).touch()
        os.rename(partial, volume)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return True
