"""Real-daemon tests: a `slurmpod server --provider local` subprocess, real namespaces, munge and Slurm."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.serverproc import ServerProcess, free_port

IMAGE_STORE = Path(os.environ.get("SLURMPOD_IMAGE_STORE", "/var/lib/slurmpod/images"))


def default_image() -> str | None:
    """The image servers boot nodes from, if built: the image store's default (scripts/install.sh builds it), or
    with $SLURMPOD_NODE_IMAGE=<suite> (the second pass over the Slurm tests) that suite's default image."""
    choice = os.environ.get("SLURMPOD_NODE_IMAGE") or "default"
    if choice.startswith("ami-"):
        image_id: str | None = choice
    else:
        from slurmpod.lifecycle.imagestore import ImageStore

        image_id = ImageStore(IMAGE_STORE).default_pointer(None if choice == "default" else choice).get("image_id")
        if not image_id:
            return None
    return image_id if (IMAGE_STORE / str(image_id) / "rootfs").is_dir() else None


def _local_ok() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("slurmctld", "slurmd", "munged", "nsenter", "unshare", "ip"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} not installed (apt-get install -y slurmctld slurmd slurm-client munge iproute2)"
    return None


@pytest.fixture
def local_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    reason = _local_ok()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("lp")
    try:
        yield state
    finally:
        from slurmpod.providers.local.cleanup import cleanup, find_leftovers

        if find_leftovers(state):
            cleanup(state)


@contextmanager
def running_server(state: Path, *extra: str) -> Iterator[ServerProcess]:
    """A real server process on the local provider (``extra``: more server options); its clusters deleted and the
    server stopped even on failure."""
    srv = ServerProcess(state, free_port(), "--provider", "local", *extra)
    srv.start()
    try:
        yield srv
    finally:
        _report_unsettled(srv)
        _delete_all(srv)
        srv.stop()
        log = state / "server.log"
        if log.exists():  # (without the tests' status polling, which would fill it)
            lines = [line for line in log.read_text().splitlines() if not _POLL.search(line)]
            print("---- server log tail ----\n" + "\n".join(lines[-60:]))


@pytest.fixture
def local_server(local_state: Path) -> Iterator[ServerProcess]:
    """A real server process on the local provider; stopped (and its nodes cleaned) even on failure."""
    with running_server(local_state) as srv:
        yield srv


_POLL = re.compile(r"slurmpod\.api: \S+ (ListClusters|DescribeCluster|ListClusterNodes|DescribeClusterNode) 200 ")
#: what a node is doing, for a cluster a test left neither InService nor Failed (a hung lifecycle script ...)
_NODE_REPORT = ("ps -ww -eo pid,ppid,stat,etime,wchan:24,args --forest | grep -v ' \\[' ; "
                "echo '-- provisioning.log'; tail -n 25 /var/log/provision/provisioning.log 2>&1; "
                "echo '-- tcp'; ss -tanp 2>&1 | head -n 20")


def _report_unsettled(srv: ServerProcess) -> None:
    """Prints the processes, lifecycle log and connections of every node of a cluster still on its way
    (shown by pytest only when the test failed)."""
    import subprocess
    import sys

    try:
        c = srv.client()
        unsettled = [s for s in c.list_clusters()["ClusterSummaries"] if s["ClusterStatus"] not in ("InService",
                                                                                                  "Failed")]
        for summary in unsettled:
            cluster_id = summary["ClusterArn"].rsplit("/", 1)[1]
            nodes = c.list_cluster_nodes(ClusterName=summary["ClusterName"])["ClusterNodeSummaries"]
            for n in nodes:
                target = f"sagemaker-cluster:{cluster_id}_{n['InstanceGroupName']}-{n['InstanceId']}"
                r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "connect", target, "--state-dir",  # noqa: S603
                                    str(srv.state_dir), "--", "bash", "-c", _NODE_REPORT],
                                   capture_output=True, text=True, timeout=30)
                print(f"---- {summary['ClusterName']} {n['InstanceGroupName']} {n['InstanceId']} "
                      f"({n['InstanceStatus']['Status']}), still {summary['ClusterStatus']} ----\n"
                      f"{r.stdout}{r.stderr}")
        if not unsettled:
            return
        for log in sorted((srv.state_dir / "local" / "pkgproxy" / "log").glob("*")):  # what the nodes fetched
            print(f"---- {log.name} (package proxy) ----\n" + "\n".join(log.read_text(errors="replace")
                                                                     .splitlines()[-15:]))
        ss = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=10).stdout
        print("---- host listeners (package proxies, registries) ----\n" + "\n".join(
            line for line in ss.splitlines() if ":3142 " in line or ":5000 " in line))
    except Exception as exc:  # a report only: never the reason a test fails
        print(f"no report of the unsettled nodes: {exc!r}")


def _delete_all(srv: ServerProcess) -> None:
    import time

    try:
        c = srv.client()
        names = [x["ClusterName"] for x in c.list_clusters()["ClusterSummaries"]]
        for n in names:
            c.delete_cluster(ClusterName=n)
        deadline = time.monotonic() + 60
        while names and time.monotonic() < deadline and c.list_clusters()["ClusterSummaries"]:
            time.sleep(0.2)
    except Exception as exc:  # best effort; the state-dir cleanup catches the rest
        print(f"cleanup via API failed: {exc}")


def in_node(state: Path, cluster: str, group: str | None, *argv: str, timeout: float = 60) -> Any:
    """Runs a command inside a node through `slurmpod connect` (exactly what a user would do)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "slurmpod.cli", "connect", "--cluster", cluster, "--state-dir", str(state)]
    if group:
        cmd += ["--group", group]
    return subprocess.run([*cmd, "--", *argv], capture_output=True, text=True, timeout=timeout)  # noqa: S603
