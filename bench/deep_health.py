"""Scenario 8, deep health checks on the local provider (real Slurm, real nodes).

A cluster of 1 controller + 2 compute nodes whose group has OnStartDeepHealthChecks ["InstanceStress",
"InstanceConnectivity"]; measured per node, from ListClusterNodes: (a) on start, from the node showing
DeepHealthCheckInProgress to Running; (b) on demand, StartClusterHealthCheck of one node, then of both (one job
step per check across them), from the call to every checked node Running again. Side by side: the floor, the
stress-ng seconds the check itself spends per node (``--deep-health-check-stress-seconds``); the rest is isolation
(reservation, partition, feature), the srun steps and the release.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.api_run import POLL, _wait_status, delete_and_wait, seed_groups, stop_server
from bench.server import BenchServer
from bench.stats import summary

NAME = "deep_health_check"
DESCRIPTION = ("Deep health checks (InstanceStress + InstanceConnectivity) on local compute nodes: seconds per node "
               "on start (DeepHealthCheckInProgress -> Running) and on demand (StartClusterHealthCheck -> Running), "
               "next to the stress-ng seconds of the check itself")
STRESS_SECONDS = 5.0
TIMEOUT = 240.0
CHECKS = ["InstanceStress", "InstanceConnectivity"]


def _statuses(client: Any, name: str) -> dict[str, str]:
    nodes = client.list_cluster_nodes(ClusterName=name, MaxResults=100)["ClusterNodeSummaries"]
    return {n["InstanceId"]: n["InstanceStatus"]["Status"] for n in nodes if n["InstanceGroupName"] == "compute-group"}


def _on_demand(client: Any, name: str, ids: list[str]) -> float:
    t0 = time.monotonic()
    client.start_cluster_health_check(ClusterName=name, DeepHealthCheckConfigurations=[
        {"InstanceGroupName": "compute-group", "DeepHealthChecks": CHECKS, "InstanceIds": ids}])
    seen = False
    while time.monotonic() - t0 < TIMEOUT:
        st = _statuses(client, name)
        seen = seen or any(st.get(i) == "DeepHealthCheckInProgress" for i in ids)
        if seen and all(st.get(i) == "Running" for i in ids):
            return time.monotonic() - t0
        time.sleep(POLL)
    raise RuntimeError(f"on-demand deep health check of {ids} not done within {TIMEOUT:.0f}s")


def run_once(server: BenchServer, name: str) -> dict[str, Any]:
    client = server.client()
    groups = seed_groups(2)
    groups[1]["OnStartDeepHealthChecks"] = CHECKS
    client.create_cluster(ClusterName=name, InstanceGroups=groups)
    try:
        began: dict[str, float] = {}
        ended: dict[str, float] = {}
        deadline = time.monotonic() + TIMEOUT
        while len(ended) < 2 and time.monotonic() < deadline:
            now = time.monotonic()
            for iid, st in _statuses(client, name).items():
                if st == "DeepHealthCheckInProgress":
                    began.setdefault(iid, now)
                elif st == "Running" and iid in began:
                    ended.setdefault(iid, now)
            time.sleep(POLL / 2)
        _wait_status(client, name, {"InService", "Failed"}, TIMEOUT)
        ids = sorted(ended)
        one = _on_demand(client, name, ids[:1])
        both = _on_demand(client, name, ids)
        return {"on_start": [ended[i] - began[i] for i in ids], "on_demand_one": one, "on_demand_two": both}
    finally:
        delete_and_wait(client, name)


def run(runs: int, workdir: Path | None = None, progress: Any = print) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-dhc-", dir=workdir))
    server = BenchServer(root / "server", extra=("--deep-health-check-stress-seconds", f"{STRESS_SECONDS:g}"))
    samples: list[dict[str, Any]] = []
    try:
        server.start()
        for i in range(runs):
            r = run_once(server, f"bench-dhc-{i + 1}")
            samples.append(r)
            progress(f"run {i + 1}/{runs}: on start {', '.join(f'{s:.2f}' for s in r['on_start'])} s per node; "
                     f"on demand 1 node {r['on_demand_one']:.2f} s, 2 nodes {r['on_demand_two']:.2f} s")
    except BaseException:
        if server.log.exists():
            progress(server.log_tail())
        raise
    finally:
        from bench.seed_local import _cleanup_dir

        stop_server(server, progress)
        if not _cleanup_dir(root / "server"):
            shutil.rmtree(root, ignore_errors=True)
    return {
        "description": DESCRIPTION,
        "runs": len(samples),
        "stress_seconds_floor": STRESS_SECONDS,
        "on_start_per_node": summary([s for r in samples for s in r["on_start"]]),
        "on_demand_one_node": summary([r["on_demand_one"] for r in samples]),
        "on_demand_two_nodes": summary([r["on_demand_two"] for r in samples]),
    }
