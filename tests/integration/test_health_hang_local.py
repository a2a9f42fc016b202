"""One cluster's Slurm commands hang (real Slurm): the other cluster's reconcile passes are not delayed.

Health observation runs off the loop thread, one observation per cluster at a time, so a hung `sinfo` /
`scontrol` on one controller stalls only that cluster's health checks. Before the split, the loop thread ran
them inline and every cluster's pass waited for the command's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import in_node, running_server
from tests.serverproc import ServerProcess, seed_groups, wait_status

pytestmark = pytest.mark.integration

HANG = "#!/bin/sh\\nexec sleep 300\\n"  # printf format
PASS = "slurmpod_reconcile_pass_duration_seconds"


@pytest.fixture
def server(local_state: Path) -> Iterator[ServerProcess]:
    with running_server(local_state, "--accounting", "none") as srv:
        try:
            yield srv
        finally:
            for name in ("sinfo", "scontrol"):  # let the hung cluster be deleted normally
                in_node(local_state, "hung", None, "rm", "-f", f"/usr/local/bin/{name}")


def _passes(srv: ServerProcess) -> dict[str, float]:
    """Bucket upper bound -> cumulative count of reconcile passes."""
    text = requests.get(f"{srv.endpoint}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == f"{PASS}_bucket":
                out[s.labels["le"]] = s.value
    return out


def _running(c: Any, name: str) -> list[dict[str, Any]]:
    return c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]


def test_hung_slurm_commands_of_one_cluster_do_not_delay_another(server: ServerProcess) -> None:
    state = server.state_dir
    c = server.client()
    for name in ("hung", "fine"):
        c.create_cluster(ClusterName=name, InstanceGroups=seed_groups(1))
    for name in ("hung", "fine"):
        d = wait_status(c, name, {"InService", "Failed"}, timeout=120)
        assert d["ClusterStatus"] == "InService", d.get("FailureMessage")

    for name in ("sinfo", "scontrol"):
        script = f"printf '{HANG}' > /usr/local/bin/{name}; chmod 755 /usr/local/bin/{name}"
        assert in_node(state, "hung", None, "sh", "-c", script).returncode == 0
    assert in_node(state, "hung", None, "timeout", "2", "sinfo").returncode == 124  # it really hangs now

    time.sleep(6)  # the next health check of "hung" is blocked in sinfo from here on
    before = _passes(server)
    compute = next(n["InstanceId"] for n in _running(c, "fine") if n["InstanceGroupName"] == "compute-group")
    t0 = time.monotonic()
    assert c.batch_reboot_cluster_nodes(ClusterName="fine", NodeIds=[compute])["Successful"] == [compute]
    time.sleep(1)
    while True:
        node = next(n for n in _running(c, "fine") if n["InstanceId"] == compute)
        if node["InstanceStatus"]["Status"] == "Running":
            break
        assert time.monotonic() - t0 < 60, "the other cluster's reboot did not complete while one cluster hangs"
        time.sleep(0.2)
    time.sleep(max(0.0, 12 - (time.monotonic() - t0)))
    after = _passes(server)
    passes = after["+Inf"] - before["+Inf"]
    quick = after["2.5"] - before["2.5"]
    assert passes >= 3 and quick == passes, (before, after)  # no pass waited for the hung commands
