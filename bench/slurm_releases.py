"""Scenario 7: the seed topology on the Slurm 24.11 image (Debian trixie) against the Slurm 22.05 image (bookworm),
side by side in one run: two servers, default configuration (accounting on), runs alternating between them.

Each run is ``CreateCluster`` -> InService -> first job COMPLETED -> DeleteCluster through boto3 (``run_slurmpod``,
the same run as scenario 1). The ratio is 24.11 / 22.05 (no target: the figure tells what the newer release costs).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.api_run import ApiRun, run_slurmpod, stop_server
from bench.floor import floor_image
from bench.seed_local import Progress, _cleanup_dir, image_doc
from bench.server import BenchServer
from bench.stats import figure, summary

NAME = "slurm_releases"
SUITES = ("bookworm", "trixie")  # Slurm 22.05, Slurm 24.11
log = logging.getLogger(__name__)


def run(runs: int, workdir: Path | None = None, progress: Progress = print) -> dict[str, Any]:
    images = {suite: floor_image(suite) for suite in SUITES}  # fails early, with what to do, when one is missing
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-rel-", dir=workdir))
    servers = {suite: BenchServer(root / suite, extra=("--node-image", suite)) for suite in SUITES}
    results: dict[str, list[ApiRun]] = {suite: [] for suite in SUITES}
    try:
        for srv in servers.values():
            srv.start()
        for i in range(runs):
            for suite in (SUITES if i % 2 == 0 else SUITES[::-1]):
                a = run_slurmpod(servers[suite], f"bench-rel-{i + 1}")
                results[suite].append(a)
                progress(f"run {i + 1}/{runs} {suite} (Slurm {images[suite].slurm_version}): InService "
                         f"{a.in_service:.2f}s, job done {a.job_done:.2f}s (delete {a.delete:.2f}s)")
    finally:
        for srv in servers.values():
            stop_server(srv, log.warning)
        left = [x for suite in SUITES for x in _cleanup_dir(root / suite)]
        if left:
            log.error("leftovers remain under %s: %s", root, left)
        else:
            shutil.rmtree(root, ignore_errors=True)
    doc: dict[str, Any] = {"images": {s: image_doc(images[s]) for s in SUITES}}
    for suite in SUITES:
        doc[suite] = {"in_service": summary([a.in_service for a in results[suite]], "s"),
                      "job_done": summary([a.job_done for a in results[suite]], "s")}
    doc["ratios"] = {k: figure(doc["trixie"][k]["median"]["value"] / doc["bookworm"][k]["median"]["value"], "ratio")
                     for k in ("in_service", "job_done") if doc["bookworm"][k]["median"]["value"]}
    return doc
