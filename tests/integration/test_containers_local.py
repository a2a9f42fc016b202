"""Containers in jobs on real Slurm (issue 20): Pyxis's ``--container-*`` options, the cluster registry, Docker.

One cluster (a controller, two ``ml.p5.48xlarge`` compute nodes with 8 emulated GPUs each) of the node image under
test. The container image is small and made here, with no outside registry: a root filesystem of the *other*
Debian suite (so its ``/etc/os-release`` differs from the node's) with python3, built by mmdebstrap from the
host's deb cache, pushed to the cluster's registry with ``slurmpod containers import`` and copied to ``/fsx`` as
a tar file. Jobs run as ``ubuntu``.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.containers import tiny_rootfs
from tests.integration.conftest import IMAGE_STORE, default_image, in_node, running_server
from tests.serverproc import ROLE, ServerProcess, wait_status

pytestmark = pytest.mark.integration

CLUSTER = "containers"
TASK = ("import os, socket; p = os.environ['SLURM_PROCID']; "
        "open('/fsx/ubuntu/ctr.' + p, 'w').write(socket.gethostname()); "
        "print('task', p, socket.gethostname(), open('/etc/os-release').readline().strip())")


@dataclass
class Env:
    srv: ServerProcess
    state: Path
    fsx: Path
    node_release: str
    image_release: str
    computes: list[str]


def _cli(state: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", *args, "--state-dir", str(state)],  # noqa: S603
                          capture_output=True, text=True, timeout=timeout)


def sh(env: Env, script: str, group: str | None = None, timeout: float = 300) -> Any:
    return in_node(env.state, CLUSTER, group, "bash", "-c", script, timeout=timeout)


def ok(env: Env, script: str, group: str | None = None, timeout: float = 300) -> str:
    r = sh(env, script, group, timeout)
    assert r.returncode == 0, (script, r.stdout, r.stderr)
    return str(r.stdout)


def as_ubuntu(cmd: str) -> str:
    return "cd /tmp && su ubuntu -c " + shlex.quote(cmd)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    image = default_image()
    if image is None:
        pytest.skip("no node image in the image store (scripts/install.sh builds it)")
    manifest = json.loads((IMAGE_STORE / image / "manifest.json").read_text())
    if manifest.get("recipe", 0) < 7:
        pytest.skip(f"node image {image} predates containers (recipe {manifest.get('recipe')} < 7)")
    for tool in ("mmdebstrap", "podman", "docker-registry", "mksquashfs"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed on this host (scripts/install.sh)")
    from slurmpod.providers.local.cleanup import cleanup, find_leftovers

    state = tmp_path_factory.mktemp("ctr")
    work = Path(tempfile.mkdtemp(prefix="slurmpod-test-ctr-", dir="/var/tmp"))
    try:
        other = "trixie" if manifest.get("suite") == "bookworm" else "bookworm"
        tar = work / "tiny.tar"
        try:
            tiny_rootfs(tar, other, extra='echo v1 > "$1"/VERSION')
        except RuntimeError as exc:
            pytest.fail(str(exc))
        with running_server(state) as srv:
            c = srv.client()
            groups = [{"InstanceGroupName": "controller-group", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
                       "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
                      {"InstanceGroupName": "gpu-group", "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2,
                       "ThreadsPerCore": 1, "ExecutionRole": ROLE,
                       "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["gpu"]}}]
            c.create_cluster(ClusterName=CLUSTER, InstanceGroups=groups)
            d = wait_status(c, CLUSTER, {"InService", "Failed"}, timeout=900)
            assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
            r = _cli(state, "containers", "import", str(tar), "--name", "tiny:1")
            assert r.returncode == 0, r.stderr
            fsx = next(state.glob("local/clusters/*/volumes/fsx"))
            shutil.copy(tar, fsx / "tiny.tar")
            e = Env(srv, state, fsx, "", "", [])
            ok(e, "mkdir -p /fsx/ubuntu && chown ubuntu:ubuntu /fsx/ubuntu")
            e.node_release = ok(e, "head -1 /etc/os-release", "gpu-group").strip()
            e.image_release = "Debian GNU/Linux 13 (trixie)" if other == "trixie" else "Debian GNU/Linux 12 (bookworm)"
            e.computes = ok(e, "sinfo -h -N -p gpu -o %N").split()
            yield e
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if find_leftovers(state):
            cleanup(state)


def _healthy(env: Env) -> None:
    """Both compute nodes are usable (idle or mixed, never drained or down)."""
    states = ok(env, "sinfo -h -N -p gpu -o '%N %t'").split("\n")
    for line in filter(None, states):
        assert line.split()[1] in ("idle", "mix", "alloc", "comp"), states


def test_srun_runs_every_task_in_the_container(env: Env) -> None:
    out = ok(env, as_ubuntu(f"srun -N 2 -p gpu --container-image=tiny:1 --container-mounts=/fsx:/fsx "
                            f"python3 -c \"{TASK}\""))
    lines = sorted(line for line in out.splitlines() if line.startswith("task "))
    assert len(lines) == 2, out
    assert {line.split()[2] for line in lines} == set(env.computes)  # one task on each node
    assert all(env.image_release in line for line in lines) and env.image_release not in env.node_release
    for p in ("0", "1"):  # written to /fsx inside the container, seen on the shared storage
        assert (env.fsx / "ubuntu" / f"ctr.{p}").read_text() in env.computes


def test_gpus_are_visible_in_the_container(env: Env) -> None:
    out = ok(env, as_ubuntu("srun -N 1 -p gpu --gres=gpu:2 --container-image=tiny:1 "
                            "sh -c 'echo CVD=$CUDA_VISIBLE_DEVICES; ls /dev/nvidia0 /dev/nvidia1; "
                            "head -1 /etc/os-release'"))
    assert "CVD=0,1" in out and "/dev/nvidia0" in out and "/dev/nvidia1" in out and env.image_release in out


def test_sbatch_runs_the_batch_script_in_the_container(env: Env) -> None:
    script = "#!/bin/sh\nhead -1 /etc/os-release\necho job=$SLURM_JOB_ID\ncat /VERSION\n"
    (env.fsx / "ubuntu" / "ctr-job.sh").write_text(script)
    ok(env, as_ubuntu("sbatch --wait -N1 -p gpu -o /fsx/ubuntu/ctr-job.out --container-image=tiny:1 "
                      "/fsx/ubuntu/ctr-job.sh"), timeout=600)
    out = (env.fsx / "ubuntu" / "ctr-job.out").read_text()
    assert env.image_release in out and "job=" in out and "v1" in out, out


@pytest.mark.parametrize(("options", "says"), [
    ("--container-image=nosuch:9", "nosuch:9 not found"),
    ("--container-image=tiny:1 --container-mounts=/fsx/secret:/s", "mount source /fsx/secret is not readable"),
    ("--container-image=tiny:1 --container-mounts=/fsx:fsx", "'/fsx:fsx': the destination 'fsx' is not an absolute"),
    ("--container-image=tiny:1 --container-mounts=/fsx:/fsx:rx", "unknown flag 'rx'"),
    ("--container-image=/fsx/missing.sqsh", "image file /fsx/missing.sqsh does not exist"),
])
def test_bad_input_fails_the_step_clearly_and_the_node_stays_healthy(env: Env, options: str, says: str) -> None:
    ok(env, "mkdir -p /fsx/secret && chmod 700 /fsx/secret")
    r = sh(env, as_ubuntu(f"srun -N 2 -p gpu {options} true"))
    assert r.returncode != 0 and says in r.stderr, (r.stdout, r.stderr)
    _healthy(env)
    assert "v1" in ok(env, as_ubuntu("srun -N 2 -p gpu --container-image=tiny:1 cat /VERSION"))


def test_image_file_on_shared_storage_and_a_changed_tag(env: Env) -> None:
    out = ok(env, as_ubuntu("srun -N 2 -p gpu --container-image=/fsx/tiny.tar sh -c 'head -1 /etc/os-release'"))
    assert out.count(env.image_release) == 2
    # the same tag pushed again with other contents: the next step sees it (podman pulls what changed)
    root = Path(tempfile.mkdtemp(prefix="slurmpod-test-ctr-v2-", dir="/var/tmp"))
    try:
        subprocess.run(["tar", "-C", str(root), "-xf", str(env.fsx / "tiny.tar")], check=True, timeout=300)
        (root / "VERSION").write_text("v2\n")
        r = _cli(env.state, "containers", "import", str(root), "--name", "tiny:2")
        assert r.returncode == 0, r.stderr
        assert "v2" in ok(env, as_ubuntu("srun -N 1 -p gpu --container-image=tiny:2 cat /VERSION"))
        r = _cli(env.state, "containers", "import", str(root), "--name", "tiny:1")
        assert r.returncode == 0, r.stderr
        assert ok(env, as_ubuntu("srun -N 2 -p gpu --container-image=tiny:1 cat /VERSION")).split() == ["v2", "v2"]
        # a squashfs image (Enroot's .sqsh) on /fsx, and the same file pushed by the import command
        sqsh = env.fsx / "tiny.sqsh"
        subprocess.run(["mksquashfs", str(root), str(sqsh), "-noappend", "-quiet", "-no-progress"], check=True,
                       capture_output=True, timeout=600)
        assert ok(env, as_ubuntu("srun -N 1 -p gpu --container-image=/fsx/tiny.sqsh cat /VERSION")).split() == ["v2"]
        r = _cli(env.state, "containers", "import", str(sqsh), "--name", "tiny-sqsh:1")
        assert r.returncode == 0, r.stderr
        assert ok(env, as_ubuntu("srun -N 1 -p gpu --container-image=tiny-sqsh:1 cat /VERSION")).split() == ["v2"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    r = _cli(env.state, "containers", "import", str(env.fsx / "tiny.tar"), "--name", "tiny:1")  # as it was
    assert r.returncode == 0, r.stderr


def test_named_container_workdir_remap_root_home_env(env: Env) -> None:
    script = """#!/bin/bash
set -e
I=tiny:1
srun --container-image=$I --container-name=keep sh -c 'echo kept > /tmp/marker'
srun --container-image=$I --container-name=keep cat /tmp/marker
srun --container-image=$I --container-workdir=/usr pwd
srun --container-image=$I --container-remap-root id -u
srun --container-image=$I --container-mount-home sh -c 'test -d $HOME && echo home=$HOME'
MYVAR=fromjob srun --container-image=$I --container-env=PATH sh -c 'echo myvar=$MYVAR path=$PATH'
"""
    (env.fsx / "ubuntu" / "ctr-named.sh").write_text(script)
    (env.fsx / "ubuntu" / "ctr-named.sh").chmod(0o755)
    out = ok(env, as_ubuntu("salloc -N1 -p gpu /fsx/ubuntu/ctr-named.sh"), timeout=600).split()
    assert out[:4] == ["kept", "/usr", "0", "home=/home/ubuntu"], out
    assert out[4] == "myvar=fromjob" and out[5].startswith("path=") and "/usr/bin" in out[5], out
    # the job's containers are gone with the job (SPANK job epilog)
    left = ok(env, "for i in $(seq 60); do n=$(srun -N 2 -p gpu podman ps --all --quiet "
                   "--filter label=slurmpod.job | wc -l); [ $n = 0 ] && break; sleep 1; done; echo $n")
    assert left.strip() == "0", left


def test_docker_and_podman_push_on_a_node(env: Env) -> None:
    registry = ok(env, "cat /etc/slurmpod/registry", "gpu-group").strip()
    out = ok(env, as_ubuntu(f"id -nG; docker run --rm {registry}/tiny:1 true && echo docker-ok; "
                            f"docker info --format '{{{{.DockerRootDir}}}} {{{{.Driver}}}}'"), "gpu-group")
    assert "docker" in out.split("\n")[0].split() and "docker-ok" in out and "/var/lib/docker overlay2" in out
    ok(env, f"podman pull -q {registry}/tiny:1 >/dev/null && podman tag {registry}/tiny:1 {registry}/pushed:1 && "
            f"podman push -q {registry}/pushed:1", "gpu-group")
    assert "v1" in ok(env, as_ubuntu("srun -N 2 -p gpu --container-image=pushed:1 cat /VERSION"))


def test_slurm_native_container_with_a_rootless_bundle(env: Env) -> None:
    assert "RunTimeRun=" in ok(env, "cat /etc/slurm/oci.conf")
    ok(env, """set -e
rm -rf /fsx/ubuntu/bundle && mkdir -p /fsx/ubuntu/bundle/rootfs && tar -C /fsx/ubuntu/bundle/rootfs -xf /fsx/tiny.tar
chown -R ubuntu:ubuntu /fsx/ubuntu/bundle""")
    ok(env, as_ubuntu("cd /fsx/ubuntu/bundle && crun spec --rootless && python3 -c \"import json; "
                      "c = json.load(open('config.json')); c['process']['terminal'] = False; "
                      "c['mounts'] = [m if m['destination'] != '/proc' else {'destination': '/proc', 'type': 'bind', "
                      "'source': '/proc', 'options': ['rbind', 'nosuid', 'noexec', 'nodev']} for m in c['mounts']]; "
                      "c['linux']['namespaces'] = [n for n in c['linux']['namespaces'] if n['type'] != 'pid']; "
                      "json.dump(c, open('config.json', 'w'))\""))
    out = ok(env, as_ubuntu("srun -N 1 -p gpu --container=/fsx/ubuntu/bundle head -1 /etc/os-release"))
    assert env.image_release in out
