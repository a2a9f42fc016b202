"""Slurm 24.11 clusters (the image store's trixie image) on real nodes, and SchedMD's upgrade rules on real nodes.

* seed 000 on Slurm 24.11, accounting on: sbatch, `srun -N 2`, sacct; a downgrade to 22.05 is refused;
* a 22.05 cluster asked to go to 24.11 (four major releases) is refused with both versions, before any node is
  touched (same instances, same images, no event).

Skipped unless scripts/install.sh built both images (``defaults/trixie.json`` and the bookworm default).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import IMAGE_STORE, in_node
from tests.serverproc import ServerProcess, rejected, seed_groups, wait_status

pytestmark = pytest.mark.integration


def _store_default(suite: str) -> str:
    for pointer in (IMAGE_STORE / "defaults" / f"{suite}.json", IMAGE_STORE / "default.json"):
        try:
            raw = json.loads(pointer.read_text())
        except (OSError, ValueError):
            continue
        if raw.get("suite") == suite and (IMAGE_STORE / raw["image_id"] / "rootfs").is_dir():
            return str(raw["image_id"])
    pytest.skip(f"no {suite} image in the image store (scripts/install.sh builds it)")


def _register(state: Path, suite: str) -> str:
    """``slurmpod images register <suite>`` into the server's state dir: the image id."""
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "register", "--state-dir", str(state),
                        "--image-store", str(IMAGE_STORE), suite], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[1]


def _images(state: Path) -> tuple[str, str]:
    """The store's trixie and bookworm images, registered in the server's state dir (skips without them)."""
    _store_default("trixie"), _store_default("bookworm")
    return _register(state, "trixie"), _register(state, "bookworm")


def _groups(image: str, compute: int = 2) -> list[dict[str, Any]]:
    groups = seed_groups(compute)
    for g in groups:
        g["ImageId"] = image
    return groups




def _wait_job(state: Path, name: str, job: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    row = ""
    while time.monotonic() < deadline:
        row = in_node(state, name, None, "sacct", "-n", "-X", "-P", "-j", job, "-o", "JobID,State,NodeList").stdout
        if "COMPLETED" in row:
            return row.strip()
        time.sleep(0.5)
    raise AssertionError(f"sacct never listed job {job} as COMPLETED; last: {row!r}")


def test_seed000_on_slurm_2411(local_server: ServerProcess) -> None:
    state = local_server.state_dir
    trixie, bookworm = _images(state)
    c = local_server.client()
    name = "slurm2411"
    c.create_cluster(ClusterName=name, InstanceGroups=_groups(trixie))
    d = wait_status(c, name, {"InService", "Failed"}, timeout=180)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    version = in_node(state, name, None, "sinfo", "-V").stdout
    assert version.split()[-1].startswith("24.11"), version
    compute = sorted(n["PrivateDnsHostname"] for n in c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
                     if n["InstanceGroupName"] == "compute-group")

    r = in_node(state, name, None, "bash", "-c", "cd /home && sbatch --parsable --partition=compute --wrap=hostname")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    row = _wait_job(state, name, job)
    assert row.split("|")[2] in compute, row
    r = in_node(state, name, None, "timeout", "60", "srun", "-N", "2", "--partition=compute", "hostname", timeout=90)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == compute
    steps = in_node(state, name, None, "sacct", "-n", "-P", "-o", "JobName,State", "-S", "now-1hour").stdout
    assert "hostname|COMPLETED" in steps, steps  # the srun's job and step, recorded by the 24.11 slurmdbd

    msg = rejected(c.update_cluster_software, ClusterName=name, ImageId=bookworm)
    assert "cannot be downgraded" in msg and "22.05" in msg and "24.11" in msg, msg


def test_22_05_to_24_11_is_refused_before_any_node_is_touched(local_server: ServerProcess) -> None:
    state = local_server.state_dir
    trixie, bookworm = _images(state)
    c = local_server.client()
    name = "slurm2205"
    c.create_cluster(ClusterName=name, InstanceGroups=_groups(bookworm, compute=1))
    d = wait_status(c, name, {"InService", "Failed"}, timeout=180)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    before = c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]
    events = c.list_cluster_events(ClusterName=name, MaxResults=100)["Events"]
    msg = rejected(c.update_cluster_software, ClusterName=name, ImageId=trixie)
    assert "22.05" in msg and "24.11" in msg and "at most 3 major releases" in msg, msg
    after = c.describe_cluster(ClusterName=name)
    assert after["ClusterStatus"] == "InService"
    assert {g["CurrentImageId"] for g in after["InstanceGroups"]} == {bookworm}
    assert all(g.get("SoftwareUpdateStatus") in (None, "Succeeded") for g in after["InstanceGroups"])
    assert c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"] == before
    assert c.list_cluster_events(ClusterName=name, MaxResults=100)["Events"] == events
    assert in_node(state, name, None, "sinfo", "-V").stdout.split()[-1].startswith("22.05")
