"""Scenario 3, scale on the local provider: 1 controller + 50 compute nodes -> InService, and memory per node.

slurmpod: CreateCluster through the API (``slurmpod server --provider local``, default settings) until
InService (every compute node idle in Slurm), then the PSS of every node's processes (``bench.memory``,
the recipe's mem-report.py method) and the server's RSS. Floor: the same nodes (booted from the same image:
the image store's default root filesystem, systemd as PID 1, unless ``node_image`` says otherwise) and
daemons started by ``bench.floor.run_floor`` (no API, store or reconciler), measured the same way at
"all idle". Both sides run without an accounting host (equal work).
"""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.api_run import _wait_status, delete_and_wait, seed_groups, stop_server
from bench.floor import floor_image, run_floor
from bench.memory import NodeMemory, node_memory, rss_mib
from bench.seed_local import _cleanup_dir, _server_extra, image_doc
from bench.server import BenchServer
from bench.stats import figure, summary

NAME = "scale_local"
DESCRIPTION = ("Local provider: 1 controller + 50 compute nodes, CreateCluster -> InService (all idle in Slurm), "
               "memory per node (PSS of every process of the node's PID namespace -- systemd, journald, dbus, "
               "logind, munged, slurmd, ... on image nodes -- plus its host-side unshare), averaged over the 51 "
               "nodes, next to the floor (the same nodes, same image, and daemons started without slurmpod); "
               "both sides without an accounting host")
COMPUTE = 50
QUICK_COMPUTE = 4
TARGET_IN_SERVICE = 20.0
TARGET_PSS_MIB = 16.0  # issue 14: per-node PSS averaged over the 50-node scenario (systemd nodes)
RECIPE_FLOOR_SECONDS = 7.0  # issue 8: ~7 s for 50 nodes (create 4.7 s + daemons to idle 2.1 s)
RECIPE_FLOOR_MIB = 2.5  # issue 8 / recipe §7: ~2.5 MiB per node (bash holder, host-root nodes without systemd)
CREATE_TIMEOUT = 300.0

Progress = Callable[[str], None]


def _slurmpod_run(server: BenchServer, name: str, compute: int) -> tuple[float, NodeMemory, float]:
    client = server.client()
    t0 = time.monotonic()
    client.create_cluster(ClusterName=name, InstanceGroups=seed_groups(compute),
                          Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}})
    try:
        _wait_status(client, name, {"InService", "Failed"}, CREATE_TIMEOUT)
        in_service = time.monotonic() - t0
        time.sleep(1.0)  # let the daemons settle, as the recipe does before mem-report
        assert server.proc is not None
        return in_service, node_memory(server.proc.pid), rss_mib(server.proc.pid)
    finally:
        delete_and_wait(client, name, timeout=CREATE_TIMEOUT)


def _measure_into(box: list[NodeMemory]) -> None:
    box.append(node_memory(os.getpid()))


def run(runs: int, workdir: Path | None = None, progress: Progress = print, quick: bool = False, *,
        node_image: str = "default") -> dict[str, Any]:
    compute = QUICK_COMPUTE if quick else COMPUTE
    image = floor_image(node_image)  # fails early, with what to do, when the image is missing
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-scale-", dir=workdir))
    # equal work: the floor runs no slurmdbd
    server = BenchServer(root / "server", extra=("--accounting", "none", *_server_extra(node_image)))
    sp_times: list[float] = []
    sp_mem: list[NodeMemory] = []
    server_rss: list[float] = []
    fl_times: list[float] = []
    fl_mem: list[NodeMemory] = []
    try:
        server.start()
        for i in range(runs):
            for side in (("slurmpod", "floor") if i % 2 == 0 else ("floor", "slurmpod")):
                if side == "slurmpod":
                    t, mem, rss = _slurmpod_run(server, f"bench-scale-{i + 1}", compute)
                    sp_times.append(t)
                    sp_mem.append(mem)
                    server_rss.append(rss)
                    progress(f"run {i + 1}/{runs} slurmpod: {compute} compute InService {t:.2f}s, "
                             f"{mem.per_node_mib:.2f} MiB/node over {mem.nodes} nodes, server RSS {rss:.0f} MiB")
                else:
                    box: list[NodeMemory] = []
                    f = run_floor(root / "floor", compute, on_idle=functools.partial(_measure_into, box),
                                  probe=False, image=image)
                    fl_times.append(f.all_idle)
                    fl_mem.append(box[0])
                    progress(f"run {i + 1}/{runs} floor:    all idle {f.all_idle:.2f}s, "
                             f"{box[0].per_node_mib:.2f} MiB/node over {box[0].nodes} nodes")
    except BaseException:
        if server.log.exists():
            progress(server.log_tail())
            kept = root.parent / f"{root.name}-server.log"  # the state dir goes below; its log is the evidence
            shutil.copyfile(server.log, kept)
            progress(f"server log kept in {kept}")
        raise
    finally:
        stop_server(server, progress, timeout=CREATE_TIMEOUT)
        left = _cleanup_dir(root / "server") + _cleanup_dir(root / "floor")
        if left:
            progress(f"leftovers remain under {root}: {left}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    doc = result_doc(compute, sp_times, sp_mem, server_rss, fl_times, fl_mem)
    doc["node_image"] = image_doc(image)
    return doc


def result_doc(compute: int, sp_times: list[float], sp_mem: list[NodeMemory], server_rss: list[float],
               fl_times: list[float], fl_mem: list[NodeMemory]) -> dict[str, Any]:
    sp_node = statistics.median(m.per_node_mib for m in sp_mem)
    fl_node = statistics.median(m.per_node_mib for m in fl_mem)
    return {
        "description": DESCRIPTION,
        "compute_nodes": compute,
        "runs": len(sp_times),
        "slurmpod": {
            "in_service": summary(sp_times, target=TARGET_IN_SERVICE),
            "pss_per_node": figure(sp_node, "MiB", TARGET_PSS_MIB),
            "pss_by_command_kib": sp_mem[-1].per_command_kib,
            "processes_by_command": sp_mem[-1].per_command_count,
            "nodes_counted": sp_mem[-1].nodes,
            "server_rss": figure(statistics.median(server_rss), "MiB"),
        },
        "floor": {
            "all_idle": summary(fl_times),
            "pss_per_node": figure(fl_node, "MiB"),
            "pss_by_command_kib": fl_mem[-1].per_command_kib,
            "processes_by_command": fl_mem[-1].per_command_count,
            "nodes_counted": fl_mem[-1].nodes,
        },
        "ratios": {
            "in_service": figure(statistics.median(sp_times) / statistics.median(fl_times), "ratio"),
            "pss_per_node": figure(sp_node / fl_node if fl_node else 0.0, "ratio"),
        },
        "recipe_reference": {"seconds_50_nodes": RECIPE_FLOOR_SECONDS, "mib_per_node": RECIPE_FLOOR_MIB},
    }
