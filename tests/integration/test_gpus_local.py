"""GPUs in Slurm on a local cluster of ``ml.p5.48xlarge`` compute nodes (real Slurm 22.05, real nodes).

The nodes get 8 emulated GPUs (character devices /dev/nvidia0..7 in their own /dev), register ``Gres=gpu:h100:8``
and read their own gres.conf lines; a CPU group in the same cluster registers without GRES. Jobs see HyperPod's
behaviour: global GPU indices in CUDA_VISIBLE_DEVICES (task/none), ``--gpus-per-node``, a refused ``--gres=gpu:9``,
and ``gres/gpu`` in sacct's AllocTRES (accounting is on: the server's default).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import default_image, in_node, running_server
from tests.serverproc import ROLE, ServerProcess, wait_status

pytestmark = pytest.mark.integration

CLUSTER = "gpus"


def _groups() -> list[dict[str, Any]]:
    def group(name: str, itype: str, node_type: str, partitions: list[str] | None = None) -> dict[str, Any]:
        slurm: dict[str, Any] = {"NodeType": node_type}
        if partitions:
            slurm["PartitionNames"] = partitions
        return {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": 1, "ThreadsPerCore": 1,
                "ExecutionRole": ROLE, "SlurmConfig": slurm}

    return [group("controller-group", "ml.t3.medium", "Controller"),
            group("gpu-group", "ml.p5.48xlarge", "Compute", ["gpu"]),
            group("cpu-group", "ml.c5.xlarge", "Compute", ["cpu"])]


def _sh(state: Path, group: str | None, script: str, timeout: float = 90) -> str:
    r = in_node(state, CLUSTER, group, "bash", "-c", script, timeout=timeout)
    assert r.returncode == 0, (script, r.stdout, r.stderr)
    return str(r.stdout).strip()


def _env(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.fixture(params=["default", "builtin"])
def gpu_server(request: pytest.FixtureRequest, local_state: Path) -> Iterator[ServerProcess]:
    """A server with accounting (its default) on systemd nodes of the default image, or on the legacy host-root
    nodes (``--node-image builtin``: slurmd started directly, not through the image's unit)."""
    if request.param == "default" and default_image() is None:
        pytest.skip("no default image in the image store (scripts/install.sh builds it)")
    with running_server(local_state, "--node-image", request.param) as srv:
        yield srv


def test_p5_nodes_schedule_gpus(gpu_server: ServerProcess) -> None:
    state = gpu_server.state_dir
    c: Any = gpu_server.client()
    t0 = time.monotonic()
    c.create_cluster(ClusterName=CLUSTER, InstanceGroups=_groups())
    d = wait_status(c, CLUSTER, {"InService", "Failed"}, timeout=300)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    print(f"InService after {time.monotonic() - t0:.1f}s")
    hosts = {n["InstanceGroupName"]: n["PrivateDnsHostname"]
             for n in c.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"]}
    gpu, cpu = hosts["gpu-group"], hosts["cpu-group"]

    conf = _sh(state, None, "cat /etc/slurm/slurm.conf")
    assert "GresTypes=gpu" in conf.splitlines() and "AccountingStorageTRES=gres/gpu" in conf.splitlines()
    # the GPU node: emulated character devices, its own gres.conf lines, Gres registered; the CPU node: none
    assert _sh(state, "gpu-group", "stat -c %F /dev/nvidia0 /dev/nvidia7").splitlines() == \
        ["character special file"] * 2
    assert _sh(state, "gpu-group", "grep -c '^Name=gpu Type=h100 File=/dev/nvidia' /etc/slurmpod/gres.conf") == "8"
    assert _sh(state, "cpu-group", "grep -c '^Name=' /etc/slurmpod/gres.conf || true") == "0"
    assert _sh(state, "cpu-group", "ls /dev | grep -c nvidia || true") == "0"
    show = _sh(state, None, f"scontrol show node {gpu}")
    assert "Gres=gpu:h100:8" in show and "CfgTRES=cpu=96," in show and "gres/gpu=8" in show, show
    assert "Gres=(null)" in _sh(state, None, f"scontrol show node {cpu}")
    systemd = _sh(state, "gpu-group", "cat /proc/1/comm") == "systemd"
    assert systemd == ("builtin" not in gpu_server.extra)

    # two concurrent jobs of 4 GPUs on the one p5 node: global indices 0-3 and 4-7
    out = _sh(state, None, f"cd /tmp && for i in 1 2; do srun -w {gpu} --gres=gpu:4 bash -c "
                           "'env | grep -E \"^(CUDA_VISIBLE_DEVICES|SLURM_JOB_ID|SLURM_JOB_GPUS|SLURM_STEP_GPUS|"
                           "SLURM_GPUS_ON_NODE)=\"; echo ---; sleep 4' > /tmp/gpujob$i.out & done; wait; "
                           "cat /tmp/gpujob1.out /tmp/gpujob2.out", timeout=120)
    print(out)
    envs = [_env(part) for part in out.split("---") if part.strip()]
    assert len(envs) == 2, out
    assert sorted(e.get("CUDA_VISIBLE_DEVICES", "") for e in envs) == ["0,1,2,3", "4,5,6,7"], out
    for e in envs:
        assert e.get("SLURM_GPUS_ON_NODE") == "4" and e.get("SLURM_STEP_GPUS") == e["CUDA_VISIBLE_DEVICES"], e
    job_ids = [e["SLURM_JOB_ID"] for e in envs]

    # two concurrent steps of one 8-GPU allocation split it the same way
    out = _sh(state, None, f"cd /tmp && salloc -w {gpu} --gres=gpu:8 -n2 bash -c 'for i in 1 2; do "
                           "srun -n1 --exact --gres=gpu:4 bash -c \"echo \\$CUDA_VISIBLE_DEVICES; sleep 3\" & done; "
                           "wait'", timeout=120)
    assert sorted(line for line in out.splitlines() if re.fullmatch(r"[0-9,]+", line)) == ["0,1,2,3", "4,5,6,7"], out

    # --gpus-per-node, and a batch job's SLURM_JOB_GPUS
    e = _env(_sh(state, None, f"srun -w {gpu} --gpus-per-node=2 env"))
    assert e.get("CUDA_VISIBLE_DEVICES") == "0,1" and e.get("SLURM_GPUS_ON_NODE") == "2", e
    job = _sh(state, None, f"cd /tmp && sbatch --parsable -w {gpu} --gres=gpu:3 -o /tmp/batch.out "
                           "--wrap 'echo JOB_GPUS=$SLURM_JOB_GPUS CVD=$CUDA_VISIBLE_DEVICES'").split(";")[0]
    deadline = time.monotonic() + 60
    while "JOB_GPUS" not in (text := _sh(state, "gpu-group", "cat /tmp/batch.out 2>/dev/null || true")):
        assert time.monotonic() < deadline, f"batch job {job} wrote nothing"
        time.sleep(0.5)
    assert "JOB_GPUS=0,1,2 CVD=0,1,2" in text, text

    # more GPUs than a node has: refused at submission, as on HyperPod
    r = in_node(state, CLUSTER, None, "bash", "-c", "cd /tmp && sbatch --gres=gpu:9 --wrap true")
    assert r.returncode != 0 and "Requested node configuration is not available" in r.stderr, (r.stdout, r.stderr)
    # CPU nodes run jobs without GPU variables
    e = _env(_sh(state, None, "srun -p cpu env"))
    assert "CUDA_VISIBLE_DEVICES" not in e and e.get("SLURMD_NODENAME") == cpu, e

    # accounting: the GPU jobs' AllocTRES has gres/gpu
    deadline = time.monotonic() + 60
    while True:
        rows = _sh(state, None, f"sacct -n -X -P -j {','.join(job_ids)} -o JobID,State,AllocTRES")
        if rows.count("COMPLETED") == 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    print(rows)
    lines = rows.splitlines()
    assert len(lines) == 2 and all("COMPLETED" in row and "gres/gpu=4" in row for row in lines), rows
