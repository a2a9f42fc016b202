"""Scenario 8: several servers on one PostgreSQL (simulated provider, issue 18).

N clusters x M simulated nodes created through two servers sharing a throwaway PostgreSQL (``tests.pg``), the
clusters spread over both by leases; seconds until all are InService, and DescribeCluster latency (p50/p99)
under 50 concurrent clients while they boot. The same with one server on the same database, for comparison.
Full size: 1,000 clusters x 20 nodes (targets: all InService <= 60 s, p99 <= 100 ms); ``--quick``: 40 x 5.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.api_run import ROLE
from bench.server import BenchServer, free_port
from bench.stats import figure

NAME = "several servers on one PostgreSQL (simulated)"
FULL, QUICK = (1000, 20), (40, 5)
CLIENTS = 50
TARGET_IN_SERVICE, TARGET_P99_MS = 60.0, 100.0


def _groups(nodes: int) -> list[dict[str, Any]]:
    return [
        {"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "compute-group", "InstanceType": "ml.c5.xlarge", "InstanceCount": nodes - 1,
         "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["compute"]}},
    ]


def _measure(servers: list[BenchServer], clusters: int, nodes: int) -> dict[str, Any]:
    clients = [s.client() for s in servers]
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: clients[i % len(clients)].create_cluster(
            ClusterName=f"b{i}", InstanceGroups=_groups(nodes)), range(clusters)))
    latencies: list[float] = []
    done = threading.Event()

    def describe(k: int) -> None:
        c = servers[k % len(servers)].client()
        i = k
        while not done.is_set():
            t = time.perf_counter()
            c.describe_cluster(ClusterName=f"b{i % clusters}")
            latencies.append(time.perf_counter() - t)
            i += CLIENTS

    threads = [threading.Thread(target=describe, args=(k,), daemon=True) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    pending = {f"b{i}" for i in range(clusters)}
    watcher = clients[0]
    while pending and time.monotonic() - t0 < 900:
        summaries: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = watcher.list_clusters(MaxResults=100, **({"NextToken": token} if token else {}))
            summaries += page["ClusterSummaries"]
            token = page.get("NextToken")
            if not token:
                break
        pending -= {s["ClusterName"] for s in summaries if s["ClusterStatus"] == "InService"}
        time.sleep(0.5)
    in_service = time.monotonic() - t0
    done.set()
    for t in threads:
        t.join(timeout=10)
    lat = sorted(latencies)
    p99 = lat[int(0.99 * (len(lat) - 1))] * 1000 if lat else 0.0
    return {"servers": len(servers), "clusters": clusters, "nodes": clusters * nodes, "in_service_s": in_service,
            "not_in_service": len(pending), "describe_calls": len(lat),
            "describe_p50_ms": statistics.median(lat) * 1000 if lat else 0.0, "describe_p99_ms": p99}


def _run_with(db: str, count: int, root: Path, clusters: int, nodes: int) -> dict[str, Any]:
    state = root / f"state{count}"
    servers = [BenchServer(state, free_port(), provider="simulated",
                           extra=("--db", db, "--replica-id", f"r{i}", "--lease-seconds", "10"))
               for i in range(count)]
    try:
        for s in servers:
            s.start()
        return _measure(servers, clusters, nodes)
    finally:
        for s in servers:
            s.stop()


def run(quick: bool = False, workdir: Path | None = None, size: tuple[int, int] | None = None) -> dict[str, Any]:
    from tests.pg import postgres_server

    clusters, nodes = size or (QUICK if quick else FULL)
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-ha-", dir=workdir))
    with postgres_server() as pg:
        two = _run_with(pg.create_database("two"), 2, root, clusters, nodes)
        one = _run_with(pg.create_database("one"), 1, root, clusters, nodes)
    return {
        "description": f"{clusters} clusters x {nodes} simulated nodes, 2 servers vs 1 on PostgreSQL",
        "quick": quick,
        "in_service": figure(two["in_service_s"], "s", TARGET_IN_SERVICE if (clusters, nodes) == FULL else None),
        "describe_p99": figure(two["describe_p99_ms"], "ms", TARGET_P99_MS),
        "one_server_in_service": figure(one["in_service_s"], "s"),
        "one_server_describe_p99": figure(one["describe_p99_ms"], "ms"),
        "per_run": [two, one],
    }


if __name__ == "__main__":
    import json
    import sys

    c, n = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else FULL
    print(json.dumps(run(size=(c, n)), indent=2))
