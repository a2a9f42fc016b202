"""Deep health checks on a local cluster of ``ml.p5.48xlarge`` workers (real Slurm, real nodes, boto3).

OnStartDeepHealthChecks ["InstanceStress", "InstanceConnectivity"]: the new workers show DeepHealthCheckInProgress
while they sit in HyperPod's Slurm objects (reservation, hidden partition, feature), then Running. One of them gets
an injected GPU fault (the ``gpu-xid`` marker) while its stress check runs: it fails, is replaced under the same
hostname and the replacement is checked again and ends Running. Then StartClusterHealthCheck on demand (a second
request at once is refused with ConflictException) and a node busy longer than the (shortened) busy timeout is
skipped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import default_image, in_node, running_server
from tests.serverproc import ROLE, wait_status

pytestmark = pytest.mark.integration

CLUSTER = "dhc"
CHECKS = ["InstanceStress", "InstanceConnectivity"]
XID = json.dumps({"kind": "gpu-xid", "gpu": 0, "xid": 79})


def _groups() -> list[dict[str, Any]]:
    return [
        {"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "gpu-group", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2, "ThreadsPerCore": 1,
         "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["gpu"]},
         "OnStartDeepHealthChecks": CHECKS},
    ]


def _sh(state: Path, script: str, target: str | None = None, timeout: float = 60) -> str:
    if target is None:
        r = in_node(state, CLUSTER, None, "bash", "-c", script, timeout=timeout)
    else:
        import subprocess
        import sys
        r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "connect", target, "--state-dir", str(state), "--",
                            "bash", "-c", script], capture_output=True, text=True, timeout=timeout)  # noqa: S603
    assert r.returncode == 0, (script, r.stdout, r.stderr)
    return str(r.stdout).strip()


def _workers(c: Any) -> list[dict[str, Any]]:
    return [n for n in c.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"]
            if n["InstanceGroupName"] == "gpu-group"]


def _events(c: Any) -> list[str]:
    return [e["Description"] for e in c.list_cluster_events(ClusterName=CLUSTER, MaxResults=100)["Events"]]


def test_deep_health_checks(local_state: Path) -> None:
    if default_image() is None:
        pytest.skip("no default image in the image store (scripts/install.sh builds it)")
    with running_server(local_state, "--deep-health-check-stress-seconds", "6",
                        "--deep-health-check-busy-timeout", "8") as srv:
        state, c = srv.state_dir, srv.client()
        arn = c.create_cluster(ClusterName=CLUSTER, InstanceGroups=_groups())["ClusterArn"]
        cid = arn.rsplit("/", 1)[1]
        # the workers are checked before they take jobs; one gets a GPU fault while its stress check runs
        deadline, victim, seen = time.monotonic() + 240, None, ""
        while victim is None:
            assert time.monotonic() < deadline, _workers(c)
            checking = [n for n in _workers(c) if n["InstanceStatus"]["Status"] == "DeepHealthCheckInProgress"]
            if checking:
                victim = checking[0]
                target = f"sagemaker-cluster:{cid}_gpu-group-{victim['InstanceId']}"
                _sh(state, f"mkdir -p /run/slurmpod/faults && echo '{XID}' > /run/slurmpod/faults/gpu-xid", target)
                seen = _sh(state, "scontrol show reservations; sinfo -a -N -h -o '%N %P %f'")
            time.sleep(0.3)
        assert "ReservationName=hyperpod-deep-health-check" in seen, seen
        assert "MAINT" in seen and "hyperpod-system-maintenance" in seen, seen
        assert "SageMakerDeepHealthCheck:InProgress" in seen, seen

        d = wait_status(c, CLUSTER, {"InService", "Failed"}, timeout=300)
        assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
        workers = _workers(c)
        assert [n["InstanceStatus"]["Status"] for n in workers] == ["Running", "Running"], workers
        assert victim["InstanceId"] not in {n["InstanceId"] for n in workers}
        successor = next(n for n in workers if n["PrivateDnsHostname"] == victim["PrivateDnsHostname"])
        events = _events(c)
        assert any(f"Deep health checks failed on Instance {victim['InstanceId']}" in e for e in events), events
        assert any(f"Deep health checks passed on Instance {successor['InstanceId']}" in e for e in events), events
        # passed: out of the reservation and partition, feature cleared, serving its partition
        after = _sh(state, "scontrol show reservations; sinfo -a -N -h -o '%N %P %f'")
        assert "hyperpod-deep-health-check" not in after and "hyperpod-system-maintenance" not in after, after
        assert "SageMakerDeepHealthCheck" not in after, after
        assert len(_sh(state, "srun -p gpu -N2 hostname", timeout=60).splitlines()) == 2
        stream = state / "logs" / cid / "DeepHealthCheckResults" / f"{successor['InstanceId']}.log"
        text = stream.read_text()
        assert "stress-ng success" in text and "GpuPci Count check success" in text, text
        assert "Connectivity check success" in text, text
        target = f"sagemaker-cluster:{cid}_gpu-group-{successor['InstanceId']}"
        assert "stress-ng success" in _sh(state, "cat /var/log/aws/clusters/sagemaker-deep-health-check.log", target)

        # on demand: one request per cluster at a time; a node busy longer than the busy timeout is skipped
        busy = workers[0]
        job = _sh(state, f"sbatch --parsable -w {busy['PrivateDnsHostname']} -N1 --wrap 'sleep 40'").split(";")[0]
        running = time.monotonic() + 30  # the job must hold the node before the request (not pend behind a release)
        while _sh(state, f"squeue -h -j {job} -o %T") != "RUNNING":
            assert time.monotonic() < running, _sh(state, "squeue -a; sinfo -N")
            time.sleep(0.3)
        c.start_cluster_health_check(ClusterName=CLUSTER, DeepHealthCheckConfigurations=[
            {"InstanceGroupName": "gpu-group", "DeepHealthChecks": ["InstanceStress"]}])
        with pytest.raises(c.exceptions.ClientError) as err:
            c.start_cluster_health_check(ClusterName=CLUSTER, DeepHealthCheckConfigurations=[
                {"InstanceGroupName": "gpu-group", "DeepHealthChecks": ["InstanceStress"]}])
        assert err.value.response["Error"]["Code"] == "ConflictException"
        assert "Only one on-demand deep health check" in err.value.response["Error"]["Message"]
        squeue = ""
        deadline = time.monotonic() + 60
        while "sagemaker-deep-health-check" not in squeue and time.monotonic() < deadline:
            squeue = _sh(state, "squeue -a -h -o '%j %N'")
        assert "sagemaker-deep-health-check" in squeue, squeue
        deadline = time.monotonic() + 90
        while True:
            events = _events(c)
            idle = workers[1]["InstanceId"]
            passed = sum(f"Deep health checks passed on Instance {idle}" in e for e in events)  # on start, on demand
            done = passed >= 2 and any(
                f"Deep health checks skipped on Instance {busy['InstanceId']}" in e for e in events)
            if done:
                break
            assert time.monotonic() < deadline, events[:10]
            time.sleep(0.5)
        wait = time.monotonic() + 30
        while any(n["InstanceStatus"]["Status"] != "Running" for n in _workers(c)):
            assert time.monotonic() < wait, _workers(c)
            time.sleep(0.3)
        assert "hyperpod-deep-health-check" not in _sh(state, "scontrol show reservations")
