"""Lifecycle scripts on real nodes (local provider, real Slurm): order, isolation, snapshots, failures.

One cluster exercises the happy path:

* ``controller-group`` (1) and ``compute-group`` (2) run ``OnCreate`` (before any Slurm daemon),
* ``init-group`` (1 compute node) runs ``OnInitComplete`` (after the node joined Slurm).

Every script records what it saw under ``/root/slurmpod-lc`` in its node's root volume; the test reads
those files back through ``slurmpod connect``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from slurmpod.lifecycle.snapshot import compute_digest
from tests.serverproc import ROLE

pytestmark = pytest.mark.integration

CLUSTER = "lifecycle-cluster"

ON_CREATE = r"""#!/bin/bash
set -eu
running() { for f in /proc/[0-9]*/comm; do cat "$f" 2>/dev/null; done | grep -qx "$1"; }
out=/root/slurmpod-lc
mkdir -p "$out"
{
  echo "uid=$(id -u)"
  echo "cwd=$(pwd)"
  echo "version=$(cat version.txt)"
  echo "hostname=$(hostname)"
  echo "digest=${SLURMPOD_LIFECYCLE_DIGEST:-}"
  echo "envgroup=${SLURMPOD_INSTANCE_GROUP:-}"
  echo "envinstance=${SLURMPOD_INSTANCE_ID:-}"
  if running slurmd; then echo slurmd=running; else echo slurmd=stopped; fi
  if running slurmctld; then echo slurmctld=running; else echo slurmctld=stopped; fi
  if running munged; then echo munged=running; else echo munged=stopped; fi
  ./helper.sh
  python3 find_group.py
} > "$out/on_create.txt" 2>&1
cp /opt/ml/config/resource_config.json "$out/resource_config.json"
touch "/root/marker-$(hostname)"
echo "on_create done on $(hostname)"
"""

ON_INIT_COMPLETE = r"""#!/bin/bash
set -u
running() { for f in /proc/[0-9]*/comm; do cat "$f" 2>/dev/null; done | grep -qx "$1"; }
out=/root/slurmpod-lc
mkdir -p "$out"
{
  echo "uid=$(id -u)"
  echo "cwd=$(pwd)"
  echo "version=$(cat version.txt)"
  echo "hostname=$(hostname)"
  echo "digest=${SLURMPOD_LIFECYCLE_DIGEST:-}"
  if running slurmd; then echo slurmd=running; else echo slurmd=stopped; fi
  echo "sinfo=$(sinfo -h -n "$(hostname)" -o '%t' 2>&1 | head -n 1)"
  ./helper.sh
} > "$out/on_init_complete.txt" 2>&1
touch "/root/marker-$(hostname)"
"""

HELPER_V1 = "#!/bin/bash\necho helper=v1\n"
HELPER_V2 = "#!/bin/bash\necho helper=v2\n"

# What AWS's sample lifecycle scripts do: find the node's address with a UDP socket towards a
# non-local address, then look that address up in resource_config.json to find the node's group.
FIND_GROUP = r"""
import json
import socket

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("10.254.254.254", 1))
    ip = s.getsockname()[0]
except OSError as exc:
    ip = f"ERROR {exc}"
print(f"myip={ip}")
doc = json.load(open("/opt/ml/config/resource_config.json"))
mine = [g["Name"] for g in doc["InstanceGroups"] for i in g["Instances"] if i["CustomerIpAddress"] == ip]
print(f"mygroup={','.join(mine) or 'NONE'}")
"""

FAIL = r"""#!/bin/bash
echo "fail-line-1 starting"
echo "fail-line-2 doing work"
echo "fail-line-3 something broke" >&2
echo "fail-line-4 giving up"
exit 3
"""


# ---- helpers ---------------------------------------------------------------------------------------


def on_node(state: Path, cluster_id: str, group: str, instance_id: str, *argv: str,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Runs a command inside one specific node via ``slurmpod connect <target>``."""
    target = f"sagemaker-cluster:{cluster_id}_{group}-{instance_id}"
    cmd = [sys.executable, "-m", "slurmpod.cli", "connect", target, "--state-dir", str(state), "--", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)  # noqa: S603


def kv(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def write_source(root: Path, *, on_create: str = ON_CREATE, helper: str = HELPER_V1, version: str = "v1") -> None:
    root.mkdir(parents=True, exist_ok=True)
    files = {"on_create.sh": on_create, "on_init_complete.sh": ON_INIT_COMPLETE, "helper.sh": helper,
             "find_group.py": FIND_GROUP, "version.txt": version + "\n"}
    for name, text in files.items():
        p = root / name
        p.write_text(text)
        p.chmod(0o755 if name.endswith(".sh") else 0o644)


def source_digest(root: Path) -> str:
    files = tuple(sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()))
    return compute_digest(root, files)


def group(name: str, count: int, node_type: str, lcc: dict[str, str] | None,
          partitions: list[str] | None = None) -> dict[str, Any]:
    g: dict[str, Any] = {"InstanceGroupName": name, "InstanceType": "ml.t3.medium", "InstanceCount": count,
                         "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": node_type}}
    if partitions:
        g["SlurmConfig"]["PartitionNames"] = partitions
    if lcc is not None:
        g["LifeCycleConfig"] = lcc
    return g


def on_create_groups(src: Path, script: str, text: str, *, computes: int) -> list[dict[str, Any]]:
    """A controller group and a compute group whose OnCreate is ``script`` (``text``) in a source at ``src``."""
    write_source(src)
    (src / script).write_text(text)
    (src / script).chmod(0o755)
    return [group("controller-group", 1, "Controller", None),
            group("compute-group", computes, "Compute", {"SourceS3Uri": f"file://{src}", "OnCreate": script},
                  ["compute"])]


def all_events(client: Any, name: str) -> list[dict[str, Any]]:
    """Every event of the cluster (ListClusterEvents, all pages)."""
    out: list[dict[str, Any]] = []
    req: dict[str, Any] = {"ClusterName": name, "MaxResults": 100}
    while True:
        page = client.list_cluster_events(**req)
        out.extend(page.get("Events", []))
        if not page.get("NextToken"):
            return out
        req["NextToken"] = page["NextToken"]


def watch_status(client: Any, name: str, final: set[str], timeout: float) -> tuple[dict[str, Any], list[str]]:
    """Polls DescribeCluster until a status in ``final``; returns it and every distinct status seen."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = client.describe_cluster(ClusterName=name)
        st = last["ClusterStatus"]
        if not seen or seen[-1] != st:
            seen.append(st)
        if st in final:
            return last, seen
        time.sleep(0.03)
    raise TimeoutError(f"cluster {name} did not reach {final}; statuses seen: {seen}")


# ---- tests -----------------------------------------------------------------------------------------


def test_lifecycle_scripts_on_real_nodes(local_server, tmp_path):
    state = local_server.state_dir
    c = local_server.client()
    src = tmp_path / "lcc-src"
    write_source(src)
    expected_digest = source_digest(src)
    uri = f"file://{src}"
    create_lcc = {"SourceS3Uri": uri, "OnCreate": "on_create.sh"}
    init_lcc = {"SourceS3Uri": uri, "OnInitComplete": "on_init_complete.sh"}
    groups = [
        group("controller-group", 1, "Controller", create_lcc),
        group("compute-group", 2, "Compute", create_lcc, ["compute"]),
        group("init-group", 1, "Compute", init_lcc, ["init"]),
    ]
    t0 = time.monotonic()
    arn = c.create_cluster(ClusterName=CLUSTER, InstanceGroups=groups)["ClusterArn"]
    # The snapshot was taken when the request was accepted: changing the source now changes nothing.
    write_source(src, on_create=ON_CREATE.replace("set -eu", "set -eu\necho CHANGED; exit 9"),
                 helper=HELPER_V2, version="v2")
    assert source_digest(src) != expected_digest
    d, seen = watch_status(c, CLUSTER, {"InService", "Failed"}, timeout=50)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    print(f"InService after {time.monotonic() - t0:.2f}s; statuses {seen}")
    cluster_id = arn.rsplit("/", 1)[1]

    nodes = c.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"]
    assert sorted(n["InstanceGroupName"] for n in nodes) == [
        "compute-group", "compute-group", "controller-group", "init-group"]
    details = {n["InstanceId"]: c.describe_cluster_node(ClusterName=CLUSTER, NodeId=n["InstanceId"])["NodeDetails"]
               for n in nodes}
    hostnames = {iid: nd["PrivateDnsHostname"] for iid, nd in details.items()}
    assert len(set(hostnames.values())) == 4

    digests: set[str] = set()
    for iid, nd in details.items():
        g = nd["InstanceGroupName"]
        host, ip = nd["PrivateDnsHostname"], nd["PrivatePrimaryIp"]
        want_lcc = init_lcc if g == "init-group" else create_lcc
        assert nd["LifeCycleConfig"] == want_lcc, nd["LifeCycleConfig"]
        script = "on_init_complete" if g == "init-group" else "on_create"
        r = on_node(state, cluster_id, g, iid, "bash", "-c",
                    f"cat /root/slurmpod-lc/{script}.txt; echo; echo markers=$(cd /root && ls -d marker-* | "
                    "tr '\\n' ' '); echo lifecycle_log=$(grep -c 'slurmpod: running' "
                    "/var/log/provision/provisioning.log); "
                    "grep -o 'sha256:[0-9a-f]*' /var/log/provision/provisioning.log "
                    "| sort -u | sed 's/^/logdigest=/'")
        assert r.returncode == 0, r.stderr
        info = kv(r.stdout)
        # runs as root inside this node, from the snapshot copy, with the accept-time content
        assert info["uid"] == "0"
        assert info["hostname"] == host
        assert info["cwd"] == f"/opt/slurmpod/lifecycle/{expected_digest.split(':', 1)[1]}", info["cwd"]
        assert info["version"] == "v1" and info["helper"] == "v1", r.stdout
        assert info["digest"] == expected_digest
        assert info["logdigest"] == expected_digest  # the node's lifecycle log names the snapshot
        assert info["lifecycle_log"] == "1"  # ran exactly once
        digests.add(info["digest"])
        # root volume isolation: each node sees only its own marker
        assert info["markers"].split() == [f"marker-{host}"], info["markers"]
        assert not Path(f"/root/marker-{host}").exists(), "a node's marker leaked to the host"
        if script == "on_create":
            # OnCreate: before Slurm daemons (after the baseline started munge)
            assert info["slurmd"] == "stopped" and info["slurmctld"] == "stopped", r.stdout
            assert info["munged"] == "running", r.stdout
            assert info["envgroup"] == g and info["envinstance"] == iid
            # resource_config.json in HyperPod's format, containing this node under its own group
            rc = on_node(state, cluster_id, g, iid, "cat", "/root/slurmpod-lc/resource_config.json")
            assert rc.returncode == 0, rc.stderr
            doc = json.loads(rc.stdout)
            by_name = {x["Name"]: x for x in doc["InstanceGroups"]}
            assert set(by_name) == {"controller-group", "compute-group", "init-group"}
            assert by_name[g]["InstanceType"] == "ml.t3.medium"
            mine = [i for i in by_name[g]["Instances"] if i["InstanceId"] == iid]
            assert len(mine) == 1, by_name[g]
            assert mine[0]["CustomerIpAddress"] == ip and mine[0]["AgentIpAddress"] == ip
            assert mine[0]["InstanceName"]
            # the AWS sample scripts' lookup (own IP via a UDP socket, then match CustomerIpAddress)
            assert info["myip"] == ip, r.stdout
            assert info["mygroup"] == g, r.stdout
        else:
            # OnInitComplete: after the node joined Slurm
            assert info["slurmd"] == "running", r.stdout
            assert info["sinfo"] in ("idle", "mix", "alloc"), r.stdout
    assert digests == {expected_digest}, "all nodes of the operation must run identical files"

    # the snapshot digest is user-visible: DescribeClusterNode, ListClusterEvents and the server's log
    for nd in details.values():
        assert expected_digest in nd["InstanceStatus"].get("Message", ""), nd["InstanceStatus"]
    events = all_events(c, CLUSTER)
    for iid in details:
        mine = [e["Description"] for e in events if e.get("InstanceId") == iid and expected_digest in e["Description"]]
        assert mine, f"no event of {iid} names the snapshot digest; events: {[e['Description'] for e in events]}"
    log = (state / "server.log").read_text()
    assert expected_digest[:19] in log


def test_failing_on_create_rolls_back_and_releases_everything(local_server, tmp_path):
    state = local_server.state_dir
    c = local_server.client()
    groups = on_create_groups(tmp_path / "lcc-fail", "fail.sh", FAIL, computes=2)
    t0 = time.monotonic()
    arn = c.create_cluster(ClusterName="lifecycle-fail", InstanceGroups=groups)["ClusterArn"]
    cluster_id = arn.rsplit("/", 1)[1]
    d, seen = watch_status(c, "lifecycle-fail", {"Failed", "InService"}, timeout=50)
    print(f"{d['ClusterStatus']} after {time.monotonic() - t0:.2f}s; statuses {seen}")
    assert d["ClusterStatus"] == "Failed", seen
    assert "RollingBack" in seen, seen
    msg = d.get("FailureMessage") or ""
    assert "exit code 3" in msg, msg
    assert "fail.sh" in msg, msg
    for line in ("fail-line-2 doing work", "fail-line-3 something broke", "fail-line-4 giving up"):
        assert line in msg, msg
    # every instance was released: no nodes in the API, no holder processes or namespaces on the host
    assert c.list_cluster_nodes(ClusterName="lifecycle-fail")["ClusterNodeSummaries"] == []
    from slurmpod.providers.local.cleanup import find_leftovers

    left = find_leftovers(state)
    print(f"leftovers while Failed (before DeleteCluster): {left}")
    assert not [x for x in left if x.startswith(("process", "netns", "mount"))], left
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    assert cluster_id not in netns
    assert not list((state / "local" / "clusters").glob(f"{cluster_id}/instances/*"))
    # and deleting the Failed cluster leaves nothing at all
    c.delete_cluster(ClusterName="lifecycle-fail")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and c.list_clusters()["ClusterSummaries"]:
        time.sleep(0.1)
    assert c.list_clusters()["ClusterSummaries"] == []
    assert find_leftovers(state) == []


@pytest.mark.parametrize("case", ["missing_entry_point", "missing_dir", "entry_point_escapes"])
def test_bad_lifecycle_source_is_rejected_at_once(local_server, tmp_path, case):
    c = local_server.client()
    src = tmp_path / "lcc-src"
    write_source(src)
    uri, entry = f"file://{src}", "on_create.sh"
    if case == "missing_entry_point":
        entry = "no_such_script.sh"
    elif case == "missing_dir":
        uri = f"file://{tmp_path}/does-not-exist"
    else:
        entry = "../on_create.sh"
    groups = [
        group("controller-group", 1, "Controller", {"SourceS3Uri": uri, "OnCreate": entry}),
        group("compute-group", 1, "Compute", None, ["compute"]),
    ]
    t0 = time.monotonic()
    with pytest.raises(c.exceptions.ClientError) as err:
        c.create_cluster(ClusterName="lifecycle-bad", InstanceGroups=groups)
    elapsed = time.monotonic() - t0
    assert err.value.response["Error"]["Code"] == "ValidationException", err.value.response
    text = err.value.response["Error"]["Message"]
    assert "controller-group" in text or entry in text, text
    assert elapsed < 5, elapsed
    print(f"{case}: {text}")
    assert c.list_clusters()["ClusterSummaries"] == []
    assert not (local_server.state_dir / "local" / "clusters").exists() or not list(
        (local_server.state_dir / "local" / "clusters").iterdir())


HANG = r"""#!/bin/bash
echo "hang: started"
touch /root/hang-started
sleep 3600
"""


def test_deleting_a_cluster_whose_on_create_hangs(local_server, tmp_path):
    """DeleteCluster while an OnCreate script hangs (it would run for its whole timeout): the nodes go at once,
    the script with them, and nothing is left on the host."""
    state = local_server.state_dir
    c = local_server.client()
    groups = on_create_groups(tmp_path / "lcc-hang", "hang.sh", HANG, computes=1)
    arn = c.create_cluster(ClusterName="lifecycle-hang", InstanceGroups=groups)["ClusterArn"]
    cluster_id = arn.rsplit("/", 1)[1]
    deadline = time.monotonic() + 60
    while True:  # the script is running on the compute node
        nodes = [n for n in c.list_cluster_nodes(ClusterName="lifecycle-hang")["ClusterNodeSummaries"]
                 if n["InstanceGroupName"] == "compute-group"]
        if nodes and on_node(state, cluster_id, "compute-group", nodes[0]["InstanceId"], "test", "-e",
                             "/root/hang-started").returncode == 0:
            break
        assert time.monotonic() < deadline, "the OnCreate script never started"
        time.sleep(0.2)
    assert c.describe_cluster(ClusterName="lifecycle-hang")["ClusterStatus"] == "Creating"
    t0 = time.monotonic()
    c.delete_cluster(ClusterName="lifecycle-hang")
    while c.list_clusters()["ClusterSummaries"]:
        assert time.monotonic() - t0 < 30, c.describe_cluster(ClusterName="lifecycle-hang")
        time.sleep(0.1)
    print(f"deleted {time.monotonic() - t0:.1f}s after DeleteCluster, its OnCreate still running")
    from slurmpod.providers.local.cleanup import find_leftovers

    assert find_leftovers(state) == []
