"""``slurmpod faults``: where a fault may go (local nodes, ssh hosts that allow it) and the one-line errors for
everything else; the faults themselves are exercised on real nodes in tests/integration/test_auto_resume_local.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from slurmpod.providers import faults
from slurmpod.providers.local.provider import LocalProvider
from slurmpod.providers.ssh.pool import HostRecord
from slurmpod.providers.ssh.routing import PooledProvider
from tests.serverproc import RunningServer, seed_groups, wait_status


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", "faults", *args, "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=60)


def test_faults_cli_errors_are_one_line_and_change_nothing(sim_server: RunningServer) -> None:
    c = sim_server.client()
    c.create_cluster(ClusterName="f", InstanceGroups=seed_groups(1))
    wait_status(c, "f", {"InService"}, timeout=30)
    iid = next(n["InstanceId"] for n in c.list_cluster_nodes(ClusterName="f")["ClusterNodeSummaries"])
    before = len(c.list_cluster_events(ClusterName="f", MaxResults=100)["Events"])
    for args, message in [
        (("inject", "f", "--node", iid, "gpu-xid"), "is not a node this machine runs"),
        (("inject", "nope", "--node", iid, "gpu-xid"), "no cluster nope"),
        (("inject", "f", "--node", "i-0000000000000000", "gpu-xid"), "no node i-0000000000000000 in cluster f"),
        (("inject", "f", "--node", iid, "cosmic-ray"), "unknown fault kind 'cosmic-ray'"),
        (("clear", "f", "--node", iid), "is not a node this machine runs"),
    ]:
        r = _cli(sim_server.state_dir, *args)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert len(c.list_cluster_events(ClusterName="f", MaxResults=100)["Events"]) == before  # no event, no fault


class _Ssh:
    def __init__(self, rec: HostRecord) -> None:
        self.rec = rec
        self.pool = self

    def owns(self, cluster_id: str, instance_id: str) -> bool:
        return True

    def assigned(self, cluster_id: str, instance_id: str) -> HostRecord:
        return self.rec


@pytest.mark.parametrize("allow", [False, True])
def test_ssh_hosts_take_faults_only_when_their_pool_allows(tmp_path: Path, allow: bool) -> None:
    rec = HostRecord(name="root@10.0.0.5:22", pool="gpu", instance_type="ml.p5.48xlarge", user="root",
                     host="10.0.0.5", port=22, key="/k", allow_faults=allow)
    ssh: Any = _Ssh(rec)
    provider = PooledProvider(LocalProvider(tmp_path), ssh)
    if allow:
        faults.check_allowed(provider, "c1", "i-1", "gpu-xid")
    else:
        with pytest.raises(faults.FaultError, match="--allow-faults"):
            faults.check_allowed(provider, "c1", "i-1", "gpu-xid")
    with pytest.raises(faults.FaultError, match="power" if allow else "--allow-faults"):
        faults.check_allowed(provider, "c1", "i-1", "node-crash")
