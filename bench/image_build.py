"""Scenario 6, image build: ``slurmpod images build`` of the default (trixie) image with a warm apt cache.

Builds go through the same code as the CLI (``build_image``: mmdebstrap, the node layer, the digest, the
atomic move) into a temporary image store, reusing the host-wide apt download cache that ``scripts/install.sh``
filled when it built the default image. When that cache is empty, one build fills it first and is reported as
the cold build. Figures: warm build seconds (target <= 60 s; the recipe measured ~42 s), the image's size on
disk and file count. The temporary store is removed at the end.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.stats import figure, summary
from slurmpod.lifecycle.imagebuild import DEFAULT_CACHE, BuildRequest, build_image
from slurmpod.lifecycle.imagestore import PRIMARY_SUITE, ImageStore, Manifest

NAME = "image_build"
DESCRIPTION = ("`slurmpod images build` (mmdebstrap --variant=apt + the slurmpod node layer + digest) of the "
               "default (trixie) image with the apt download cache warm; seconds per build, image size on disk")
TARGET_WARM = 60.0
SUITE = PRIMARY_SUITE  # the default image's suite

Progress = Callable[[str], None]


def cache_is_warm(cache: Path) -> bool:
    return cache.is_dir() and any(p.suffix == ".deb" for p in cache.iterdir())


def _build(store: ImageStore, cache: Path, progress: Progress) -> tuple[float, Manifest]:
    t = time.monotonic()
    m = build_image(store, BuildRequest(suite=SUITE, cache=cache, description="bench"),
                    lambda line: progress(f"  {line.strip()}") if line.startswith(("done", "digest")) else None)
    return time.monotonic() - t, m


def run(runs: int, workdir: Path | None = None, *, cache: Path = DEFAULT_CACHE,
        progress: Progress = print) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None:
        raise RuntimeError("scenario 6 needs root and mmdebstrap (scripts/install.sh installs it)")
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-images-", dir=workdir))
    store = ImageStore(root / "images")
    cold: float | None = None
    warm: list[float] = []
    image: Manifest | None = None
    try:
        if not cache_is_warm(cache):
            progress("apt cache empty: a cold build fills it first")
            cold, image = _build(store, cache, progress)
        for i in range(max(1, runs)):
            seconds, image = _build(store, cache, progress)
            warm.append(seconds)
            progress(f"warm build {i + 1}: {seconds:.1f} s")
            for m in store.manifests():
                store.delete(m.id)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert image is not None
    return result_doc(warm, image, cold)


def result_doc(warm: list[float], image: Manifest, cold: float | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "description": DESCRIPTION,
        "suite": image.suite,
        "slurm_version": image.slurm_version,
        "warm_build": summary(warm, "s", TARGET_WARM),
        "size": figure(image.size / 2**20, "MiB"),
        "files": figure(image.files, "files"),
    }
    if cold is not None:
        doc["cold_build"] = figure(cold, "s")
    return doc
