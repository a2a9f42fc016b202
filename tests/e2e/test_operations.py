"""Every implemented operation through boto3 (normal client-side validation) against a real HTTP server.

The server uses the simulated provider, so clusters converge in well under a second.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from slurmpod.settings import Settings
from tests.serverproc import ROLE, RunningServer, free_port, seed_groups, thread_server, wait_status

ARN_RE = re.compile(r"^arn:aws:sagemaker:us-east-1:123456789012:cluster/[a-z0-9]{12}$")
INSTANCE_RE = re.compile(r"^i-[0-9a-f]{17}$")
HOSTNAME_RE = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})$")
CAPACITY_MSG = "We currently do not have sufficient capacity to launch new ml.p5.48xlarge instances. Please try again."


def _group(name: str, node_type: str, count: int, partition: str | None = None,
           itype: str = "ml.t3.medium") -> dict[str, Any]:
    sc: dict[str, Any] = {"NodeType": node_type}
    if partition:
        sc["PartitionNames"] = [partition]
    return {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count, "ThreadsPerCore": 1,
            "ExecutionRole": ROLE, "SlurmConfig": sc}


def _counts(d: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {g["InstanceGroupName"]: (g["TargetCount"], g["CurrentCount"]) for g in d["InstanceGroups"]}


def _wait(predicate: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError("condition not reached")


def _code(info: pytest.ExceptionInfo[ClientError]) -> str:
    return str(info.value.response["Error"]["Code"])


@pytest.fixture
def client(sim_server: RunningServer) -> Any:
    return sim_server.client()


def _make(client: Any, name: str, compute: int = 2, *, wait: bool = True) -> str:
    arn = client.create_cluster(
        ClusterName=name, InstanceGroups=seed_groups(compute),
        Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}},
    )["ClusterArn"]
    if wait:
        wait_status(client, name, {"InService"})
    return str(arn)


# ---- CreateCluster / DescribeCluster --------------------------------------------------------------


def test_create_and_describe_shape(client: Any) -> None:
    arn = _make(client, "ops-describe")
    assert ARN_RE.match(arn)
    d = client.describe_cluster(ClusterName="ops-describe")
    assert d["ClusterArn"] == arn
    assert d["ClusterName"] == "ops-describe"
    assert d["ClusterStatus"] == "InService"
    assert isinstance(d["CreationTime"], datetime)
    assert abs(d["CreationTime"].timestamp() - time.time()) < 120
    assert d["Orchestrator"]["Slurm"]["SlurmConfigStrategy"] == "Managed"
    assert "FailureMessage" not in d
    groups = d["InstanceGroups"]
    assert [g["InstanceGroupName"] for g in groups] == ["controller-group", "compute-group"]
    assert groups[0]["SlurmConfig"] == {"NodeType": "Controller"}
    assert groups[1]["SlurmConfig"] == {"NodeType": "Compute", "PartitionNames": ["compute"]}
    for g, n in zip(groups, (1, 2), strict=True):
        assert (g["TargetCount"], g["CurrentCount"], g["MinCount"]) == (n, n, n)
        assert g["Status"] == "InService"
        assert g["InstanceType"] == "ml.t3.medium"
        assert g["ExecutionRole"] == ROLE
        assert g["ThreadsPerCore"] == 1
        assert g["CurrentImageId"].startswith("ami-")


def test_describe_while_creating_then_in_service(client: Any) -> None:
    client.create_cluster(ClusterName="ops-early", InstanceGroups=seed_groups(3))
    first = client.describe_cluster(ClusterName="ops-early")
    assert first["ClusterStatus"] in ("Creating", "InService")
    done = wait_status(client, "ops-early", {"InService"})
    assert _counts(done) == {"controller-group": (1, 1), "compute-group": (3, 3)}


def test_strategy_defaults_to_managed_without_orchestrator(client: Any) -> None:
    client.create_cluster(ClusterName="ops-noorch", InstanceGroups=seed_groups(1))
    d = wait_status(client, "ops-noorch", {"InService"})
    assert d["Orchestrator"]["Slurm"]["SlurmConfigStrategy"] == "Managed"


def test_duplicate_name_is_resource_in_use(client: Any) -> None:
    _make(client, "ops-dup", 1, wait=False)
    with pytest.raises(ClientError) as info:
        client.create_cluster(ClusterName="ops-dup", InstanceGroups=seed_groups(1))
    assert _code(info) == "ResourceInUse"


# ---- UpdateCluster ------------------------------------------------------------------------------


def test_update_scale_up_add_group_scale_down_delete_group(client: Any) -> None:
    arn = _make(client, "ops-update", 2)

    # scale up compute-group and add extra-group with partition "extra"
    groups = seed_groups(4) + [_group("extra-group", "Compute", 1, "extra")]
    assert client.update_cluster(ClusterName="ops-update", InstanceGroups=groups)["ClusterArn"] == arn
    d = wait_status(client, "ops-update", {"InService"})
    assert _counts(d) == {"controller-group": (1, 1), "compute-group": (4, 4), "extra-group": (1, 1)}
    extra = d["InstanceGroups"][2]
    assert extra["SlurmConfig"] == {"NodeType": "Compute", "PartitionNames": ["extra"]}
    assert d["Orchestrator"]["Slurm"]["SlurmConfigStrategy"] == "Managed"  # Orchestrator omitted: kept
    assert len(client.list_cluster_nodes(ClusterName=arn)["ClusterNodeSummaries"]) == 6

    # scale down (by ARN)
    groups = seed_groups(1) + [_group("extra-group", "Compute", 1, "extra")]
    client.update_cluster(ClusterName=arn, InstanceGroups=groups)
    d = _wait(lambda: (x := client.describe_cluster(ClusterName=arn))["ClusterStatus"] == "InService"
              and _counts(x)["compute-group"] == (1, 1) and x)
    assert _counts(d) == {"controller-group": (1, 1), "compute-group": (1, 1), "extra-group": (1, 1)}
    _wait(lambda: len(client.list_cluster_nodes(ClusterName=arn)["ClusterNodeSummaries"]) == 3)

    # delete extra-group through InstanceGroupsToDelete
    client.update_cluster(ClusterName="ops-update", InstanceGroups=seed_groups(1),
                          InstanceGroupsToDelete=["extra-group"])
    d = _wait(lambda: (x := client.describe_cluster(ClusterName=arn))["ClusterStatus"] == "InService"
              and len(x["InstanceGroups"]) == 2 and x)
    assert _counts(d) == {"controller-group": (1, 1), "compute-group": (1, 1)}
    nodes = _wait(lambda: (n := client.list_cluster_nodes(ClusterName=arn)["ClusterNodeSummaries"])
                  and len(n) == 2 and n)
    assert sorted(n["InstanceGroupName"] for n in nodes) == ["compute-group", "controller-group"]


def test_update_delete_group_without_instance_groups(client: Any) -> None:
    _make(client, "ops-del-only", 1)
    client.update_cluster(ClusterName="ops-del-only",
                          InstanceGroups=seed_groups(1) + [_group("extra-group", "Compute", 1, "extra")])
    wait_status(client, "ops-del-only", {"InService"})
    client.update_cluster(ClusterName="ops-del-only", InstanceGroupsToDelete=["extra-group"])
    d = _wait(lambda: (x := client.describe_cluster(ClusterName="ops-del-only"))["ClusterStatus"] == "InService"
              and len(x["InstanceGroups"]) == 2 and x)
    assert _counts(d) == {"controller-group": (1, 1), "compute-group": (1, 1)}


def test_update_immutable_instance_type_rejected_by_server(client: Any) -> None:
    _make(client, "ops-immutable", 1)
    groups = seed_groups(1)
    groups[1]["InstanceType"] = "ml.c5.xlarge"
    with pytest.raises(ClientError) as info:
        client.update_cluster(ClusterName="ops-immutable", InstanceGroups=groups)
    assert _code(info) == "ValidationException"
    assert "cannot be changed from ml.t3.medium to ml.c5.xlarge" in info.value.response["Error"]["Message"]


# ---- ListClusters -------------------------------------------------------------------------------


def test_list_clusters_pagination_filters_and_sorting(client: Any, sim_server: RunningServer) -> None:
    names = ["lc-c", "lc-a", "lc-g", "lc-e", "lc-b", "lc-f", "lc-d"]
    arns = {}
    for name in names:
        arns[name] = _make(client, name, 1, wait=False)
    client.create_cluster(ClusterName="other-x", InstanceGroups=seed_groups(1))

    # default: CREATION_TIME Descending, 3 per page
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        kwargs: dict[str, Any] = {"MaxResults": 3, "NameContains": "lc-"}
        if token:
            kwargs["NextToken"] = token
        resp = client.list_clusters(**kwargs)
        pages += 1
        seen += [s["ClusterName"] for s in resp["ClusterSummaries"]]
        for s in resp["ClusterSummaries"]:
            assert s["ClusterArn"] == arns[s["ClusterName"]]
            assert isinstance(s["CreationTime"], datetime)
            assert s["ClusterStatus"] in ("Creating", "InService")
        token = resp.get("NextToken")
        if not token:
            break
    assert pages == 3
    assert seen == list(reversed(names))

    # SortBy NAME, both orders
    asc = client.list_clusters(SortBy="NAME", SortOrder="Ascending", NameContains="lc")["ClusterSummaries"]
    assert [s["ClusterName"] for s in asc] == sorted(names)
    desc = client.list_clusters(SortBy="NAME", SortOrder="Descending")["ClusterSummaries"]
    assert [s["ClusterName"] for s in desc] == sorted(names + ["other-x"], reverse=True)

    # paging by NAME ascending
    first = client.list_clusters(SortBy="NAME", SortOrder="Ascending", MaxResults=4)
    assert [s["ClusterName"] for s in first["ClusterSummaries"]] == ["lc-a", "lc-b", "lc-c", "lc-d"]
    second = client.list_clusters(SortBy="NAME", SortOrder="Ascending", MaxResults=4,
                                  NextToken=first["NextToken"])
    assert [s["ClusterName"] for s in second["ClusterSummaries"]] == ["lc-e", "lc-f", "lc-g", "other-x"]
    assert "NextToken" not in second

    # CREATION_TIME Ascending, time window filters
    asc_time = client.list_clusters(SortOrder="Ascending", NameContains="lc")["ClusterSummaries"]
    assert [s["ClusterName"] for s in asc_time] == names
    # boto3 sends whole epoch seconds, so use coarse windows through boto3 ...
    first_time = asc_time[0]["CreationTime"]
    everything = client.list_clusters(CreationTimeAfter=first_time - timedelta(seconds=5), NameContains="lc")
    assert len(everything["ClusterSummaries"]) == 7
    assert client.list_clusters(CreationTimeAfter=first_time + timedelta(minutes=5))["ClusterSummaries"] == []
    assert client.list_clusters(CreationTimeBefore=first_time - timedelta(seconds=5))["ClusterSummaries"] == []
    # ... and exact fractional epoch seconds over raw HTTP
    middle = asc_time[3]["CreationTime"].timestamp()
    after = sim_server.raw("SageMaker.ListClusters", {"CreationTimeAfter": middle - 1e-4, "NameContains": "lc"})
    assert {s["ClusterName"] for s in after.json()["ClusterSummaries"]} == set(names[3:])
    before = sim_server.raw("SageMaker.ListClusters", {"CreationTimeBefore": middle - 1e-4, "NameContains": "lc"})
    assert {s["ClusterName"] for s in before.json()["ClusterSummaries"]} == set(names[:3])

    # NameContains with no match
    assert client.list_clusters(NameContains="zzz")["ClusterSummaries"] == []

    # a NextToken reused with different filters
    with pytest.raises(ClientError) as info:
        client.list_clusters(MaxResults=4, SortBy="CREATION_TIME", NextToken=first["NextToken"])
    assert _code(info) == "ValidationException"
    assert info.value.response["Error"]["Message"] == (
        "Invalid pagination token: NextToken does not match the request parameters.")
    with pytest.raises(ClientError) as info:
        client.list_clusters(SortBy="NAME", SortOrder="Ascending", NameContains="lc", NextToken=first["NextToken"])
    assert _code(info) == "ValidationException"


def test_list_pagination_stable_under_inserts(client: Any) -> None:
    for name in ("st-a", "st-b", "st-c", "st-d"):
        _make(client, name, 1, wait=False)
    first = client.list_clusters(SortBy="NAME", SortOrder="Ascending", MaxResults=2)
    assert [s["ClusterName"] for s in first["ClusterSummaries"]] == ["st-a", "st-b"]
    client.create_cluster(ClusterName="st-0", InstanceGroups=seed_groups(1))  # sorts before the token
    client.create_cluster(ClusterName="st-bb", InstanceGroups=seed_groups(1))  # sorts after it
    rest = client.list_clusters(SortBy="NAME", SortOrder="Ascending", MaxResults=10, NextToken=first["NextToken"])
    assert [s["ClusterName"] for s in rest["ClusterSummaries"]] == ["st-bb", "st-c", "st-d"]


# ---- DeleteCluster ------------------------------------------------------------------------------


def test_delete_cluster_by_name_and_arn(client: Any) -> None:
    arn_a = _make(client, "del-a", 1)
    arn_b = _make(client, "del-b", 1)
    assert client.delete_cluster(ClusterName="del-a")["ClusterArn"] == arn_a
    assert client.delete_cluster(ClusterName=arn_b)["ClusterArn"] == arn_b
    status = client.describe_cluster(ClusterName=arn_b)["ClusterStatus"]
    assert status == "Deleting"
    wait_status(client, "del-a", {"gone"})
    wait_status(client, "del-b", {"gone"})
    for ref in ("del-a", arn_b):
        with pytest.raises(ClientError) as info:
            client.describe_cluster(ClusterName=ref)
        assert _code(info) == "ResourceNotFound"
        with pytest.raises(ClientError) as info:
            client.delete_cluster(ClusterName=ref)
        assert _code(info) == "ResourceNotFound"
    assert client.list_clusters()["ClusterSummaries"] == []
    # the name can be reused afterwards
    assert _make(client, "del-a", 1, wait=False) != arn_a


# ---- ListClusterNodes / DescribeClusterNode -----------------------------------------------------


def test_list_cluster_nodes(client: Any) -> None:
    arn = _make(client, "nodes", 5)
    all_nodes: list[dict[str, Any]] = []
    token = None
    pages = 0
    while True:
        kwargs: dict[str, Any] = {"ClusterName": "nodes", "MaxResults": 2}
        if token:
            kwargs["NextToken"] = token
        resp = client.list_cluster_nodes(**kwargs)
        pages += 1
        all_nodes += resp["ClusterNodeSummaries"]
        token = resp.get("NextToken")
        if not token:
            break
    assert pages == 3
    assert len(all_nodes) == 6
    assert len({n["InstanceId"] for n in all_nodes}) == 6
    launch_times = [n["LaunchTime"] for n in all_nodes]
    assert launch_times == sorted(launch_times)  # default CREATION_TIME Ascending
    for n in all_nodes:
        assert INSTANCE_RE.match(n["InstanceId"]), n["InstanceId"]
        m = HOSTNAME_RE.match(n["PrivateDnsHostname"])
        assert m and all(0 <= int(x) <= 255 for x in m.groups()), n["PrivateDnsHostname"]
        assert n["InstanceType"] == "ml.t3.medium"
        assert n["InstanceStatus"]["Status"] == "Running"
        assert isinstance(n["LaunchTime"], datetime)
    assert [n["InstanceGroupName"] for n in all_nodes].count("compute-group") == 5

    # stable across calls, and by ARN
    again = client.list_cluster_nodes(ClusterName=arn)["ClusterNodeSummaries"]
    assert {n["InstanceId"]: n["LaunchTime"] for n in again} == {n["InstanceId"]: n["LaunchTime"] for n in all_nodes}

    only_ctl = client.list_cluster_nodes(ClusterName="nodes", InstanceGroupNameContains="controller")
    assert [n["InstanceGroupName"] for n in only_ctl["ClusterNodeSummaries"]] == ["controller-group"]
    by_name = client.list_cluster_nodes(ClusterName="nodes", SortBy="NAME", SortOrder="Descending")
    assert by_name["ClusterNodeSummaries"][-1]["InstanceGroupName"] == "compute-group"
    assert by_name["ClusterNodeSummaries"][0]["InstanceGroupName"] == "controller-group"

    # a token of one cluster's listing with other filters is rejected
    first = client.list_cluster_nodes(ClusterName="nodes", MaxResults=2)
    with pytest.raises(ClientError) as info:
        client.list_cluster_nodes(ClusterName="nodes", MaxResults=2, SortBy="NAME", NextToken=first["NextToken"])
    assert _code(info) == "ValidationException"


def test_describe_cluster_node(client: Any) -> None:
    arn = _make(client, "one-node", 1)
    summaries = client.list_cluster_nodes(ClusterName="one-node")["ClusterNodeSummaries"]
    for s in summaries:
        for ref in ("one-node", arn):
            d = client.describe_cluster_node(ClusterName=ref, NodeId=s["InstanceId"])["NodeDetails"]
            assert d["InstanceId"] == s["InstanceId"]
            assert d["InstanceGroupName"] == s["InstanceGroupName"]
            assert d["LaunchTime"] == s["LaunchTime"]
            assert d["PrivateDnsHostname"] == s["PrivateDnsHostname"]
            assert d["PrivateDnsHostname"] == "ip-" + d["PrivatePrimaryIp"].replace(".", "-")
            assert d["InstanceStatus"]["Status"] == "Running"
            assert d["InstanceType"] == "ml.t3.medium"
            assert d["ThreadsPerCore"] == 1
            assert d["Placement"]["AvailabilityZone"].startswith("us-east-1")
    with pytest.raises(ClientError) as info:
        client.describe_cluster_node(ClusterName="one-node", NodeId="i-0123456789abcdef0")
    assert _code(info) == "ResourceNotFound"
    assert info.value.response["Error"]["Message"] == "Node i-0123456789abcdef0 not found in cluster one-node."


# ---- BatchDeleteClusterNodes --------------------------------------------------------------------


def test_batch_delete_cluster_nodes(client: Any) -> None:
    arn = _make(client, "batch", 3)
    nodes = client.list_cluster_nodes(ClusterName="batch")["ClusterNodeSummaries"]
    ctl = next(n["InstanceId"] for n in nodes if n["InstanceGroupName"] == "controller-group")
    workers = [n["InstanceId"] for n in nodes if n["InstanceGroupName"] == "compute-group"]
    missing = "i-0123456789abcdef0"

    resp = client.batch_delete_cluster_nodes(ClusterName=arn, NodeIds=[workers[0], ctl, missing])
    assert resp["Successful"] == [workers[0]]
    failed = {f["NodeId"]: f for f in resp["Failed"]}
    assert set(failed) == {ctl, missing}
    assert failed[ctl]["Code"] == "NodeIdInUse"
    assert failed[missing]["Code"] == "NodeIdNotFound"
    assert failed[missing]["Message"] == f"Node {missing} not found."

    d = client.describe_cluster(ClusterName="batch")
    assert d["InstanceGroups"][1]["TargetCount"] == 2
    _wait(lambda: workers[0] not in {n["InstanceId"] for n in
                                     client.list_cluster_nodes(ClusterName="batch")["ClusterNodeSummaries"]})
    with pytest.raises(ClientError) as info:
        client.describe_cluster_node(ClusterName="batch", NodeId=workers[0])
    assert _code(info) == "ResourceNotFound"
    d = wait_status(client, "batch", {"InService"})
    assert _counts(d) == {"controller-group": (1, 1), "compute-group": (2, 2)}

    # only unknown ids: every one fails, nothing changes
    resp = client.batch_delete_cluster_nodes(ClusterName="batch", NodeIds=[missing, "i-00000000"])
    assert resp["Successful"] == []
    assert [(f["NodeId"], f["Code"]) for f in resp["Failed"]] == [(missing, "NodeIdNotFound"),
                                                                   ("i-00000000", "NodeIdNotFound")]
    assert _counts(client.describe_cluster(ClusterName="batch"))["compute-group"] == (2, 2)

    with pytest.raises(ClientError) as info:
        client.batch_delete_cluster_nodes(ClusterName="ghost", NodeIds=[missing])
    assert _code(info) == "ResourceNotFound"


# ---- name-or-ARN on every operation --------------------------------------------------------------


def test_every_cluster_name_member_accepts_an_arn(client: Any) -> None:
    arn = _make(client, "by-arn", 1)
    assert client.describe_cluster(ClusterName=arn)["ClusterName"] == "by-arn"
    nodes = client.list_cluster_nodes(ClusterName=arn)["ClusterNodeSummaries"]
    assert len(nodes) == 2
    worker = next(n["InstanceId"] for n in nodes if n["InstanceGroupName"] == "compute-group")
    assert client.describe_cluster_node(ClusterName=arn, NodeId=worker)["NodeDetails"]["InstanceId"] == worker
    assert client.update_cluster(ClusterName=arn, InstanceGroups=seed_groups(2))["ClusterArn"] == arn
    d = _wait(lambda: (x := client.describe_cluster(ClusterName=arn))["ClusterStatus"] == "InService"
              and _counts(x)["compute-group"] == (2, 2) and x)
    assert d["ClusterArn"] == arn
    assert client.batch_delete_cluster_nodes(ClusterName=arn, NodeIds=[worker])["Successful"] == [worker]
    wait_status(client, arn, {"InService"})
    assert client.delete_cluster(ClusterName=arn)["ClusterArn"] == arn
    wait_status(client, arn, {"gone"})
    # an ARN from another account or region never resolves
    for other in (arn.replace("us-east-1", "us-west-2"), arn.replace("123456789012", "999999999999")):
        with pytest.raises(ClientError) as info:
            client.describe_cluster(ClusterName=other)
        assert _code(info) == "ResourceNotFound"


# ---- all-or-nothing failure semantics ------------------------------------------------------------


def _scarce(tmp_path: Path, launch_delay: float) -> Any:
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated",
                        reconcile_interval=0.1, simulated_launch_delay=launch_delay,
                        simulated_capacity={"ml.p5.48xlarge": 1})
    return thread_server(settings)


@pytest.fixture
def scarce_server(tmp_path: Path) -> Iterator[RunningServer]:
    """Room for one ml.p5.48xlarge. Launch delay 0: see test_capacity_is_enforced_for_parallel_launches."""
    with _scarce(tmp_path, 0.0) as srv:
        yield srv


def _p5_groups(count: int) -> list[dict[str, Any]]:
    return [_group("controller-group", "Controller", 1),
            _group("gpu-group", "Compute", count, "gpu", itype="ml.p5.48xlarge")]


def _provider_instances(srv: RunningServer) -> dict[str, Any]:
    assert srv.server is not None
    return dict(srv.server.runtime.provider.instances)  # type: ignore[attr-defined]


def test_create_beyond_capacity_rolls_back_to_failed(scarce_server: RunningServer) -> None:
    client = scarce_server.client()
    client.create_cluster(ClusterName="no-room", InstanceGroups=_p5_groups(2))
    statuses: set[str] = set()

    def failed() -> dict[str, Any] | None:
        d = client.describe_cluster(ClusterName="no-room")
        statuses.add(d["ClusterStatus"])
        return d if d["ClusterStatus"] == "Failed" else None

    d = _wait(failed)
    assert "RollingBack" in statuses or d["ClusterStatus"] == "Failed"
    msg = d["FailureMessage"]
    assert CAPACITY_MSG in msg
    assert re.search(r"Instance i-[0-9a-f]{17} in instance group gpu-group failed", msg), msg
    assert _wait(lambda: not _provider_instances(scarce_server))  # every launched instance released
    assert client.list_cluster_nodes(ClusterName="no-room")["ClusterNodeSummaries"] == []
    # a Failed cluster can still be deleted
    client.delete_cluster(ClusterName="no-room")
    wait_status(client, "no-room", {"gone"})


def test_update_beyond_capacity_rolls_back_to_previous_counts(scarce_server: RunningServer) -> None:
    client = scarce_server.client()
    arn = client.create_cluster(ClusterName="roll", InstanceGroups=_p5_groups(1))["ClusterArn"]
    d = wait_status(client, "roll", {"InService"})
    assert _counts(d) == {"controller-group": (1, 1), "gpu-group": (1, 1)}
    before = {n["InstanceId"] for n in client.list_cluster_nodes(ClusterName=arn)["ClusterNodeSummaries"]}

    client.update_cluster(ClusterName="roll", InstanceGroups=_p5_groups(2))
    d = _wait(lambda: (x := client.describe_cluster(ClusterName="roll"))["ClusterStatus"] == "InService"
              and x.get("FailureMessage") and x)
    assert CAPACITY_MSG in d["FailureMessage"]
    assert "gpu-group" in d["FailureMessage"]
    assert _counts(d) == {"controller-group": (1, 1), "gpu-group": (1, 1)}
    after = _wait(lambda: (s := {n["InstanceId"] for n in
                                 client.list_cluster_nodes(ClusterName=arn)["ClusterNodeSummaries"]})
                  and len(s) == 2 and s)
    assert after == before
    assert len(_provider_instances(scarce_server)) == 2


def test_capacity_is_enforced_for_parallel_launches(tmp_path: Path) -> None:
    with _scarce(tmp_path, 0.2) as srv:
        client = srv.client()
        client.create_cluster(ClusterName="race", InstanceGroups=_p5_groups(2))
        d = wait_status(client, "race", {"Failed", "InService"})
        assert d["ClusterStatus"] == "Failed"
