"""Scenario 2, root-volume replacement through UpdateClusterSoftware on the local provider.

(a) One idle compute node: a seed-shaped cluster (1 controller + 1 compute), a new release published with
``slurmpod images publish`` (the CLI, against the server's state dir), then ``UpdateClusterSoftware`` of the
compute group onto it. Measured from the call until the cluster is back InService with the node's
``ImageVersionStatus`` UpToDate (drained, root volume replaced, rebooted, rejoined Slurm, resumed), and
until the node first shows UpToDate (its root volume replaced; it may still be rejoining).
(b) A 4-node rolling update: 1 controller + 4 compute, ``MaximumBatchSize`` INSTANCE_COUNT 2, no wait.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.api_run import POLL, _wait_status, delete_and_wait, seed_groups, stop_server
from bench.server import BenchServer
from bench.stats import summary

NAME = "software_update"
DESCRIPTION = ("UpdateClusterSoftware (root-volume replacement onto a release published with `slurmpod images "
               "publish`) on the local provider: one idle compute node (1 controller + 1 compute), and a 4-node "
               "rolling update with MaximumBatchSize 2; seconds from the call to the cluster InService with every "
               "node UpToDate")
TARGET_ONE_NODE = 5.0
RECIPE_FLOOR = 2.4  # the recipe's drain + replace + resume of one compute node, seconds (issue 8)
TIMEOUT = 180.0

Progress = Callable[[str], None]


class UpdateError(RuntimeError):
    """An update did not complete."""


@dataclass
class UpdateRun:
    compute: int
    batch: int
    first_up_to_date: float = 0.0  # the first updated node shows UpToDate
    done: float = 0.0  # cluster InService and every node UpToDate


def publish_release(server: BenchServer) -> str:
    """``slurmpod images publish`` against the server's state dir; the new image id."""
    proc = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "--state-dir", str(server.state_dir),
                           "publish", "--description", "bench release"],
                          capture_output=True, text=True, timeout=60)
    m = re.search(r"published (\S+) release", proc.stdout)
    if proc.returncode != 0 or m is None:
        raise UpdateError(f"images publish failed: {proc.stdout}{proc.stderr}")
    return m.group(1)


def _statuses(client: Any, name: str, group: str) -> list[str]:
    nodes = client.list_cluster_nodes(ClusterName=name, MaxResults=100)["ClusterNodeSummaries"]
    return [n.get("ImageVersionStatus", "") for n in nodes if n["InstanceGroupName"] == group]


def run_update(server: BenchServer, name: str, compute: int, batch: int) -> UpdateRun:
    """Create (not timed) -> publish -> UpdateClusterSoftware (timed) -> delete. Deleted even on failure."""
    client = server.client()
    result = UpdateRun(compute, batch)
    client.create_cluster(ClusterName=name, InstanceGroups=seed_groups(compute),
                          Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}})
    try:
        _wait_status(client, name, {"InService", "Failed"}, TIMEOUT)
        image = publish_release(server)
        t0 = time.monotonic()
        client.update_cluster_software(
            ClusterName=name, InstanceGroups=[{"InstanceGroupName": "compute-group"}], ImageId=image,
            DeploymentConfig={"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": batch}},
                              "WaitIntervalInSeconds": 0})
        deadline = t0 + TIMEOUT
        while time.monotonic() < deadline:
            d = client.describe_cluster(ClusterName=name)
            statuses = _statuses(client, name, "compute-group")
            now = time.monotonic() - t0
            if not result.first_up_to_date and "UpToDate" in statuses:
                result.first_up_to_date = now
            if d["ClusterStatus"] == "InService" and statuses and all(s == "UpToDate" for s in statuses):
                result.done = now
                result.first_up_to_date = result.first_up_to_date or now
                return result
            if d["ClusterStatus"] == "Failed" or d.get("FailureMessage"):
                raise UpdateError(f"update of {name} failed: {d.get('FailureMessage')}")
            time.sleep(POLL)
        raise UpdateError(f"update of {name} not done within {TIMEOUT:.0f}s")
    finally:
        delete_and_wait(client, name)


def run(runs: int, workdir: Path | None = None, progress: Progress = print, quick: bool = False) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-update-", dir=workdir))
    server = BenchServer(root / "server")
    one: list[UpdateRun] = []
    rolling: list[UpdateRun] = []
    rolling_size = 2 if quick else 4
    try:
        server.start()
        for i in range(runs):
            r = run_update(server, f"bench-upd-{i + 1}", 1, 1)
            one.append(r)
            progress(f"run {i + 1}/{runs} one node: UpToDate {r.first_up_to_date:.2f}s, InService+UpToDate "
                     f"{r.done:.2f}s")
        for i in range(1 if quick else max(1, runs // 2)):
            r = run_update(server, f"bench-roll-{i + 1}", rolling_size, 2)
            rolling.append(r)
            progress(f"rolling {rolling_size} nodes, batch 2 (run {i + 1}): InService+UpToDate {r.done:.2f}s")
    except BaseException:
        if server.log.exists():
            progress(server.log_tail())
        raise
    finally:
        _stop_and_clean(server, root, progress)
    return result_doc(one, rolling)


def _stop_and_clean(server: BenchServer, root: Path, progress: Progress) -> None:
    from bench.seed_local import _cleanup_dir

    stop_server(server, progress)
    if not _cleanup_dir(root / "server"):
        shutil.rmtree(root, ignore_errors=True)


def result_doc(one: list[UpdateRun], rolling: list[UpdateRun]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": DESCRIPTION,
        "runs": len(one),
        "one_node": {
            "done": summary([r.done for r in one], target=TARGET_ONE_NODE),
            "first_up_to_date": summary([r.first_up_to_date for r in one]),
            "recipe_floor": RECIPE_FLOOR,
            "ratio_to_recipe_floor": round(statistics.median([r.done for r in one]) / RECIPE_FLOOR, 2),
        },
    }
    if rolling:
        out["rolling"] = {
            "nodes": rolling[0].compute,
            "batch": rolling[0].batch,
            "done": summary([r.done for r in rolling]),
            "first_up_to_date": summary([r.first_up_to_date for r in rolling]),
        }
    return out
