"""Scenario 11: container step start time (issue 20), side by side with the same step without a container.

One local cluster (a controller, one ``ml.c5.xlarge`` compute node) of the node image under test. The image is
small and made here: a root filesystem of python3-minimal (mmdebstrap from the host's deb cache), pushed to the
cluster's registry with ``slurmpod containers import`` as ``tiny:1``. Inside one allocation on the compute node,
each run times (``$EPOCHREALTIME`` in the controller, around each ``srun``):

* ``first``: ``srun --container-image=tiny:1 true`` after the image was removed from the node's podman storage
  (a pull from the registry, the holder container, the tasks joining it);
* ``second``: the same step again (the image is in the node's cache: podman only checks the registry's digest);
* ``plain``: ``srun true``, no container (the floor).

The ratios are second/plain and first/plain.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.api_run import ROLE, _wait_status, stop_server
from bench.seed_local import Progress, _cleanup_dir
from bench.server import BenchServer
from bench.stats import figure, summary

NAME = "containers"
CLUSTER = "bench-ctr"
PROBE = r"""
set -eu
reg=$(cat /etc/slurmpod/registry)
t() { local a=$EPOCHREALTIME; "$@" >/dev/null; local b=$EPOCHREALTIME
      python3 -c 'import sys; print(float(sys.argv[1]) - float(sys.argv[2]))' "$b" "$a"; }
srun podman rmi --force "$reg/tiny:1" >/dev/null 2>&1 || true
first=$(t srun --container-image=tiny:1 true)
second=$(t srun --container-image=tiny:1 true)
plain=$(t srun true)
echo "PROBE $first $second $plain"
"""
log = logging.getLogger(__name__)


def _groups() -> list[dict[str, Any]]:
    return [{"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
             "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
            {"InstanceGroupName": "compute-group", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1,
             "ThreadsPerCore": 1, "ExecutionRole": ROLE,
             "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["compute"]}}]


def tiny_rootfs(out: Path, suite: str = "trixie", extra: str = "") -> None:
    """A small root filesystem tar of ``suite`` (python3-minimal) from Debian's packages, through the host's deb
    cache (``extra``: a shell line run on the tree, ``$1``, before it is packed). Serialised with image builds on
    the cache's lock; mmdebstrap's temporary tree lives under ``out``'s directory, and nothing stays mounted even
    when it fails."""
    from slurmpod.lifecycle.imagebuild import DEFAULT_CACHE, _cache_lock

    tmp = Path(tempfile.mkdtemp(prefix=".mmdebstrap-", dir=out.parent))
    argv = ["mmdebstrap", "--mode=root", "--variant=essential", "--format=tar", "--include=python3-minimal",
            "--skip=essential/unlink", "--skip=download/empty", "--skip=cleanup/apt/cache",
            f'--setup-hook=mkdir -p "$1"/var/cache/apt/archives && mount --bind {DEFAULT_CACHE} '
            '"$1"/var/cache/apt/archives',
            '--customize-hook=umount "$1"/var/cache/apt/archives; rm -rf "$1"/var/lib/apt/lists/*' +
            (f"; {extra}" if extra else ""),
            "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
            suite, str(out), f"deb http://deb.debian.org/debian {suite} main"]
    try:
        with _cache_lock(DEFAULT_CACHE):
            r = subprocess.run(argv, capture_output=True, text=True, timeout=900,  # noqa: S603
                               env={**os.environ, "TMPDIR": str(tmp)})
    finally:
        for line in reversed(Path("/proc/self/mounts").read_text().splitlines()):
            target = line.split()[1]
            if target.startswith(f"{tmp}/"):
                subprocess.run(["umount", "--lazy", target], capture_output=True, timeout=60)  # noqa: S603, S607
        shutil.rmtree(tmp, ignore_errors=True)
    if r.returncode != 0:
        raise RuntimeError(f"mmdebstrap {suite} failed: {r.stderr.strip()[-600:]}")


def _cli(*args: str, timeout: float = 600) -> str:
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", *args], capture_output=True, text=True,  # noqa: S603
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"slurmpod {' '.join(args[:2])} failed: {r.stderr.strip()[-400:]}")
    return r.stdout


def run(runs: int, workdir: Path | None = None, progress: Progress = print) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-ctr-", dir=workdir))
    server = BenchServer(root / "state")
    samples: dict[str, list[float]] = {"first": [], "second": [], "plain": []}
    try:
        tiny_rootfs(root / "tiny.tar")
        server.start()
        client = server.client()
        client.create_cluster(ClusterName=CLUSTER, InstanceGroups=_groups())
        _wait_status(client, CLUSTER, {"InService", "Failed"}, 300)
        state = str(server.state_dir)
        _cli("containers", "import", str(root / "tiny.tar"), "--name", "tiny:1",
             "--state-dir", state)
        for i in range(runs):
            out = _cli("connect", "--cluster", CLUSTER, "--state-dir", state, "--",
                       "salloc", "-N1", "-p", "compute", "bash", "-c", PROBE, timeout=600)
            line = next(x for x in out.splitlines() if x.startswith("PROBE "))
            first, second, plain = (float(v) for v in line.split()[1:])
            for k, v in (("first", first), ("second", second), ("plain", plain)):
                samples[k].append(v)
            progress(f"run {i + 1}/{runs}: first container step {first:.2f}s, second {second:.2f}s, "
                     f"no container {plain:.2f}s")
    finally:
        stop_server(server, log.warning)
        left = _cleanup_dir(root / "state")
        if left:
            log.error("leftovers remain under %s: %s", root, left)
        else:
            shutil.rmtree(root, ignore_errors=True)
    doc: dict[str, Any] = {"step_seconds": {k: summary(v, "s") for k, v in samples.items()}}
    med = {k: doc["step_seconds"][k]["median"]["value"] for k in samples}
    doc["ratios"] = {"second_vs_plain": figure(med["second"] / med["plain"] if med["plain"] else 0.0, "ratio"),
                     "first_vs_plain": figure(med["first"] / med["plain"] if med["plain"] else 0.0, "ratio")}
    return doc
