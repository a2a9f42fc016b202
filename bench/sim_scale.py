"""Scenario 4, scale on the simulated provider: 1,000 and 10,000-node clusters through the real API.

The server is ``python -m bench.simserver`` (``build_server`` on the simulated provider, uvicorn, and a
stdin channel to time ``reconciler.run_once()`` in-process). Simulated launches take 0 s
(``--launch-delay 0``): the figure is slurmpod's own cost, not a configured sleep. For each size: create
(one controller + three compute groups), wait InService, page through ListClusterNodes (MaxResults 100,
the API's maximum), time idle reconcile passes, delete. The server's peak RSS (VmHWM) is read at the end.
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from bench.api_run import ROLE, delete_and_wait
from bench.machine import cpu_seconds
from bench.server import BenchServer, free_port
from bench.simserver import proc_status_kib
from bench.stats import figure

log = logging.getLogger("bench")

NAME = "sim_scale"
DESCRIPTION = ("Simulated provider (launch delay 0): a 10,000-node cluster (1 controller + 3 compute groups) "
               "CreateCluster -> InService, a full ListClusterNodes pagination (MaxResults 100), idle reconcile "
               "passes at 1,000 and 10,000 nodes (reconciler.run_once() timed in the server process), "
               "and the server's peak RSS")
TARGET_IN_SERVICE = 10.0  # issue 21 (was 30 s, issue 14)
TARGET_PAGINATION = 1.0  # issue 21 (was 2 s)
TARGET_IDLE_PASS_MS = 50.0
TARGET_PEAK_RSS_MB = 300.0
SIZES = (1000, 10000)
QUICK_SIZES = (100, 500)
PASSES = 20
POLL = 0.5  # DescribeCluster reads every node: polling faster would load the server being measured

Progress = Callable[[str], None]


def scale_groups(total: int) -> list[dict[str, Any]]:
    """One controller and three compute groups sharing ``total - 1`` nodes (partition ``compute``)."""
    per, rest = divmod(total - 1, 3)
    groups: list[dict[str, Any]] = [
        {"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}}]
    for i in range(3):
        groups.append({"InstanceGroupName": f"compute-{i + 1}", "InstanceType": "ml.c5.xlarge",
                       "InstanceCount": per + (1 if i < rest else 0), "ThreadsPerCore": 1, "ExecutionRole": ROLE,
                       "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["compute"]}})
    return groups


class SimServer:
    """``python -m bench.simserver`` as a child process."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.port = free_port()
        self.log = state_dir / "server.log"
        self.proc: subprocess.Popen[str] | None = None
        self.api = BenchServer(state_dir, self.port)

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.api.credential()
        with self.log.open("a") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.simserver", "--state-dir", str(self.state_dir),
                 "--port", str(self.port), "--launch-delay", "0"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf, text=True,
                cwd=str(Path(__file__).resolve().parents[1]))
        self.api.proc = self.proc  # type: ignore[assignment]
        import socket

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bench.simserver exited ({self.proc.returncode}); see {self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("bench.simserver did not listen within 30 s")

    def ask(self, command: str, timeout: float = 120.0) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = _readline(self.proc.stdout, timeout)
        return dict(json.loads(line))

    def peak_rss_mib(self) -> float:
        return proc_status_kib(self.proc.pid, "VmHWM") / 1024 if self.proc else 0.0

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.ask("quit", timeout=30)
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _readline(stream: IO[str], timeout: float) -> str:
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise TimeoutError(f"no answer from bench.simserver within {timeout:.0f} s")
    finally:
        sel.close()
    line = stream.readline()
    if not line:
        raise RuntimeError("bench.simserver closed its stdout")
    return line


def _wait_in_service(client: Any, name: str, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = client.describe_cluster(ClusterName=name)["ClusterStatus"]
        if st == "InService":
            return time.monotonic() - t0
        if st in ("Failed", "RollingBack"):
            raise RuntimeError(f"cluster {name} went {st}")
        time.sleep(POLL)
    raise RuntimeError(f"cluster {name} not InService within {timeout:.0f} s")


def paginate_all(client: Any, name: str) -> tuple[float, int, int]:
    """Seconds, nodes and pages of a full ListClusterNodes pagination."""
    t0 = time.monotonic()
    count = pages = 0
    kwargs: dict[str, Any] = {"ClusterName": name, "MaxResults": 100}
    while True:
        page = client.list_cluster_nodes(**kwargs)
        pages += 1
        count += len(page["ClusterNodeSummaries"])
        token = page.get("NextToken")
        if not token:
            return time.monotonic() - t0, count, pages
        kwargs["NextToken"] = token


def measure_size(sim: SimServer, client: Any, total: int, progress: Progress) -> dict[str, Any]:
    name = f"bench-sim-{total}"
    pid = sim.proc.pid if sim.proc else None
    cpu0 = cpu_seconds(pid)
    t0 = time.monotonic()
    client.create_cluster(ClusterName=name, InstanceGroups=scale_groups(total),
                          Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}})
    in_service = _wait_in_service(client, name, timeout=max(120.0, total * 0.05))
    cpu_in_service = cpu_seconds(pid) - cpu0
    progress(f"  {total} nodes: InService after {in_service:.2f}s (create call {time.monotonic() - t0:.2f}s ago; "
             f"server CPU {cpu_in_service:.2f}s)")
    cpu0, client_cpu0 = cpu_seconds(pid), cpu_seconds()
    page_s, count, pages = paginate_all(client, name)
    page_cpu_ms = (cpu_seconds(pid) - cpu0) / max(1, pages) * 1000
    client_page_cpu_ms = (cpu_seconds() - client_cpu0) / max(1, pages) * 1000
    if count != total:
        raise RuntimeError(f"ListClusterNodes returned {count} nodes, expected {total}")
    progress(f"  {total} nodes: ListClusterNodes {pages} pages in {page_s:.2f}s (CPU per page: server "
             f"{page_cpu_ms:.1f} ms, boto3 client {client_page_cpu_ms:.1f} ms)")
    time.sleep(0.5)  # let the loop's last wake-ups settle
    passes = sim.ask(f"pass {PASSES}")["pass_seconds"]
    idle_ms = statistics.median(passes) * 1000
    progress(f"  {total} nodes: idle pass median {idle_ms:.1f} ms (max {max(passes) * 1000:.1f} ms)")
    t_del = time.monotonic()
    delete_and_wait(client, name, timeout=max(120.0, total * 0.05))
    return {
        "nodes": total,
        "in_service": in_service,
        "server_cpu_in_service": cpu_in_service,
        "pagination": page_s,
        "server_cpu_ms_per_page": page_cpu_ms,
        "client_cpu_ms_per_page": client_page_cpu_ms,
        "pages": pages,
        "idle_pass_ms": [round(p * 1000, 3) for p in passes],
        "idle_pass_median_ms": idle_ms,
        "delete_to_gone": time.monotonic() - t_del,
    }


def run(quick: bool = False, workdir: Path | None = None, progress: Progress = print) -> dict[str, Any]:
    sizes = QUICK_SIZES if quick else SIZES
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-sim-", dir=workdir))
    sim = SimServer(root / "server")
    per_size: list[dict[str, Any]] = []
    try:
        sim.start()
        client = sim.api.client()
        for total in sizes:
            per_size.append(measure_size(sim, client, total, progress))
        peak = sim.peak_rss_mib()
    except BaseException:
        if sim.log.exists():
            progress("---- simserver log tail ----\n" + "\n".join(sim.log.read_text().splitlines()[-20:]))
        raise
    finally:
        sim.stop()
        shutil.rmtree(root, ignore_errors=True)
    return result_doc(per_size, peak, quick)


def result_doc(per_size: list[dict[str, Any]], peak_rss_mib: float, quick: bool = False) -> dict[str, Any]:
    small, big = per_size[0], per_size[-1]
    ratio = big["idle_pass_median_ms"] / small["idle_pass_median_ms"] if small["idle_pass_median_ms"] else 0.0
    return {
        "description": DESCRIPTION,
        "quick": quick,
        "sizes": [s["nodes"] for s in per_size],
        "in_service": figure(big["in_service"], "s", TARGET_IN_SERVICE),
        "pagination": figure(big["pagination"], "s", TARGET_PAGINATION),
        # CPU spent (the server's, the boto3 client's): less at the mercy of the machine's other load than wall time
        "server_cpu_in_service": figure(big.get("server_cpu_in_service", 0.0), "s"),
        "server_cpu_per_page": figure(big.get("server_cpu_ms_per_page", 0.0), "ms"),
        "client_cpu_per_page": figure(big.get("client_cpu_ms_per_page", 0.0), "ms"),
        "idle_pass": figure(big["idle_pass_median_ms"], "ms", TARGET_IDLE_PASS_MS),
        "idle_pass_small": figure(small["idle_pass_median_ms"], "ms"),
        "idle_pass_ratio_big_small": figure(ratio, "ratio"),
        "peak_rss": figure(peak_rss_mib * 1024 * 1024 / 1e6, "MB", TARGET_PEAK_RSS_MB),
        "per_size": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()} for s in per_size],
    }
