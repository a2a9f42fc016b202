"""ListClusterEvents / DescribeClusterEvent over HTTP (boto3 + raw requests), and ``slurmpod events``.

Every test runs a real server with the simulated provider, so clusters converge in well under a second.
"""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from slurmpod.domain.model import EventDetails, EventRecord, GroupScaling
from slurmpod.domain.status import EventLevel, ResourceType
from slurmpod.settings import Settings
from tests.serverproc import RunningServer, free_port, seed_groups, thread_server, wait_status

REPO = Path(__file__).resolve().parents[2]
EVENT_TARGET = "SageMaker.ListClusterEvents"
CAPACITY_MSG = "We currently do not have sufficient capacity to launch new ml.p5.48xlarge instances. Please try again."


# ---- helpers -----------------------------------------------------------------------------------------


def _wait(predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError("condition not reached")


def _code(info: pytest.ExceptionInfo[ClientError]) -> str:
    return str(info.value.response["Error"]["Code"])


def _msg(info: pytest.ExceptionInfo[ClientError]) -> str:
    return str(info.value.response["Error"]["Message"])


def _all(client: Any, name: str, **kw: Any) -> list[dict[str, Any]]:
    """Every page of ListClusterEvents."""
    out: list[dict[str, Any]] = []
    req: dict[str, Any] = {"ClusterName": name, **kw}
    while True:
        resp = client.list_cluster_events(**req)
        out.extend(resp["Events"])
        if not resp.get("NextToken"):
            return out
        req["NextToken"] = resp["NextToken"]


def _descs(evs: list[dict[str, Any]]) -> list[str]:
    return [e.get("Description", "") for e in evs]


def _index(evs: list[dict[str, Any]], text: str) -> int:
    for k, e in enumerate(evs):
        if e.get("Description") == text:
            return k
    raise AssertionError(f"no event {text!r} in {_descs(evs)}")


def _settle(client: Any, name: str, quiet: float = 0.6) -> list[dict[str, Any]]:
    """Ascending events once no new one has appeared for ``quiet`` seconds."""
    last = _all(client, name, SortOrder="Ascending")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = _all(client, name, SortOrder="Ascending")
        if [e["EventId"] for e in now] == [e["EventId"] for e in last]:
            return now
        last = now
    raise TimeoutError("events did not settle")


def _make(client: Any, name: str, compute: int = 2, **extra: Any) -> str:
    arn = str(client.create_cluster(ClusterName=name, InstanceGroups=seed_groups(compute), **extra)["ClusterArn"])
    wait_status(client, name, {"InService"})
    _wait(lambda: f"Cluster {name} creation completed successfully" in _descs(_all(client, name)))
    return arn


def _epoch(v: Any) -> float:
    return v.timestamp() if isinstance(v, datetime) else float(v)


def _raw_list(srv: RunningServer, **body: Any) -> Any:
    return srv.raw(EVENT_TARGET, body)


def _insert(srv: RunningServer, arn: str, n: int, **kw: Any) -> list[EventRecord]:
    """Events straight into the store (as the reconciler would write them)."""
    assert srv.server is not None
    store = srv.server.store
    cluster_id = arn.rsplit("/", 1)[1]
    rec = store.get_cluster(cluster_id)
    assert rec is not None
    evs = [
        EventRecord(
            event_id=str(uuid.uuid4()), cluster_id=cluster_id, cluster_name=rec.name, cluster_arn=rec.arn,
            resource_type=kw.get("resource_type", ResourceType.CLUSTER), level=kw.get("level", EventLevel.INFO),
            description=kw.get("description", f"test event {k}"), event_time=time.time(),
            group=kw.get("group"), instance_id=kw.get("instance_id"), details=kw.get("details", EventDetails()),
        )
        for k in range(n)
    ]
    store.add_events(evs)
    return evs


@pytest.fixture
def client(sim_server: RunningServer) -> Any:
    return sim_server.client()


@pytest.fixture
def slow_delete_server(tmp_path: Path) -> Iterator[RunningServer]:
    """Instances take a second to terminate, so a deleting cluster's events can be read."""
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated",
                        reconcile_interval=0.1, simulated_launch_delay=0.01, simulated_terminate_delay=1.0)
    with thread_server(settings) as srv:
        yield srv


# ---- flows ---------------------------------------------------------------------------------------------


def test_create_update_delete_flow_events(slow_delete_server: RunningServer) -> None:
    client = slow_delete_server.client()
    _make(client, "flow", 2)
    evs = _settle(client, "flow")
    nodes = client.list_cluster_nodes(ClusterName="flow")["ClusterNodeSummaries"]
    assert len(nodes) == 3
    assert evs[0]["Description"] == "Cluster flow creation started successfully"
    assert evs[0]["ResourceType"] == "Cluster" and "InstanceGroupName" not in evs[0]
    done = _index(evs, "Cluster flow creation completed successfully")
    for g in ("controller-group", "compute-group"):
        started = _index(evs, f"Instance creation started successfully in Cluster flow and IG {g}")
        assert 0 < started < done
    for n in nodes:
        text = (f"EC2 Instance {n['InstanceId']} successfully provisioned in Cluster flow and IG "
                f"{n['InstanceGroupName']}")
        k = _index(evs, text)
        assert 0 < k < done
        assert evs[k]["ResourceType"] == "Instance"
        assert evs[k]["InstanceId"] == n["InstanceId"]
        assert evs[k]["InstanceGroupName"] == n["InstanceGroupName"]
    times = [_epoch(e["EventTime"]) for e in evs]
    assert times == sorted(times)
    assert len({e["EventId"] for e in evs}) == len(evs)
    assert all(e["EventLevel"] == "Info" and e["ClusterName"] == "flow" for e in evs)

    # update: one more compute node
    client.update_cluster(ClusterName="flow", InstanceGroups=seed_groups(3))
    wait_status(client, "flow", {"InService"})
    _wait(lambda: "Cluster flow update completed successfully" in _descs(_all(client, "flow")))
    evs = _settle(client, "flow")
    old = {n["InstanceId"] for n in nodes}
    new = [n for n in client.list_cluster_nodes(ClusterName="flow")["ClusterNodeSummaries"]
           if n["InstanceId"] not in old]
    assert len(new) == 1
    u_start = _index(evs, "Cluster flow update started successfully")
    u_done = _index(evs, "Cluster flow update completed successfully")
    prov = _index(evs, f"EC2 Instance {new[0]['InstanceId']} successfully provisioned in Cluster flow and IG "
                       "compute-group")
    assert done < u_start < prov < u_done

    # delete: started event at once, then one termination event per instance
    client.delete_cluster(ClusterName="flow")
    seen: dict[str, dict[str, Any]] = {}
    all_nodes = [*nodes, *new]

    def terminations() -> bool:
        try:
            for e in _all(client, "flow"):
                seen[e["EventId"]] = e
        except ClientError:
            return True  # gone
        descs = {e["Description"] for e in seen.values()}
        return all(
            f"Termination of EC2 Instance {n['InstanceId']} is currently in progress in Cluster flow and IG "
            f"{n['InstanceGroupName']}" in descs for n in all_nodes)

    _wait(terminations)
    ordered = sorted(seen.values(), key=lambda e: _epoch(e["EventTime"]))
    d_start = _index(ordered, "Cluster flow deletion started successfully")
    for n in all_nodes:
        k = _index(ordered, f"Termination of EC2 Instance {n['InstanceId']} is currently in progress in Cluster "
                            f"flow and IG {n['InstanceGroupName']}")
        assert k > d_start
    wait_status(client, "flow", {"gone"})
    with pytest.raises(ClientError) as info:
        client.list_cluster_events(ClusterName="flow")
    assert _code(info) == "ResourceNotFound"


def test_batch_delete_records_termination(client: Any) -> None:
    _make(client, "bd", 2)
    victim = next(n for n in client.list_cluster_nodes(ClusterName="bd")["ClusterNodeSummaries"]
                  if n["InstanceGroupName"] == "compute-group")
    client.batch_delete_cluster_nodes(ClusterName="bd", NodeIds=[victim["InstanceId"]])
    evs = client.list_cluster_events(ClusterName="bd", NodeId=victim["InstanceId"])["Events"]
    assert evs[0]["Description"] == (f"Termination of EC2 Instance {victim['InstanceId']} is currently in progress "
                                     "in Cluster bd and IG compute-group")
    assert evs[0]["ResourceType"] == "Instance"


def test_capacity_failure_has_failure_metadata(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated",
                        reconcile_interval=0.1, simulated_capacity={"ml.p5.48xlarge": 1})
    groups = seed_groups(1)
    groups[1] = {**groups[1], "InstanceType": "ml.p5.48xlarge", "InstanceCount": 2}
    with thread_server(settings) as srv:
        client = srv.client()
        client.create_cluster(ClusterName="scarce", InstanceGroups=groups)
        wait_status(client, "scarce", {"Failed"})
        evs = _all(client, "scarce")
        failed = [e for e in evs if e["Description"] ==
                  "Instance creation in Cluster scarce and InstanceGroup compute-group failed"]
        assert failed and all(e["EventLevel"] == "Error" for e in failed)
        d = client.describe_cluster_event(ClusterName="scarce", EventId=failed[0]["EventId"])["EventDetails"]
        meta = d["EventDetails"]["EventMetadata"]
        assert list(meta) == ["Instance"]
        assert CAPACITY_MSG in meta["Instance"]["FailureMessage"]
        c_failed = next(e for e in evs if e["Description"] == "Cluster scarce creation failed")
        d = client.describe_cluster_event(ClusterName="scarce", EventId=c_failed["EventId"])["EventDetails"]
        assert CAPACITY_MSG in d["EventDetails"]["EventMetadata"]["Cluster"]["FailureMessage"]


# ---- filters and order -----------------------------------------------------------------------------------


def test_filters(sim_server: RunningServer, client: Any) -> None:
    _make(client, "filt", 2)
    evs = _settle(client, "filt")
    nodes = client.list_cluster_nodes(ClusterName="filt")["ClusterNodeSummaries"]

    compute = _all(client, "filt", InstanceGroupName="compute-group")
    assert compute and all(e["InstanceGroupName"] == "compute-group" for e in compute)
    assert {e["EventId"] for e in compute} == {e["EventId"] for e in evs if e.get("InstanceGroupName") ==
                                               "compute-group"}
    assert _all(client, "filt", InstanceGroupName="no-such-group") == []

    node = nodes[0]["InstanceId"]
    mine = _all(client, "filt", NodeId=node)
    assert mine and all(e["InstanceId"] == node for e in mine)
    assert any("successfully provisioned" in e["Description"] for e in mine)

    for rtype in ("Cluster", "Instance"):
        got = _all(client, "filt", ResourceType=rtype)
        assert got and all(e["ResourceType"] == rtype for e in got)
        assert len(got) == sum(1 for e in evs if e["ResourceType"] == rtype)
    assert _all(client, "filt", ResourceType="InstanceGroup") == [
        e for e in evs if e["ResourceType"] == "InstanceGroup"]
    both = _all(client, "filt", ResourceType="Instance", InstanceGroupName="controller-group")
    assert both and all(e["ResourceType"] == "Instance" and e["InstanceGroupName"] == "controller-group"
                        for e in both)

    # time window: exact float bounds (raw JSON), exclusive on both ends
    raw = _raw_list(sim_server, ClusterName="filt", SortOrder="Ascending").json()["Events"]
    times = [e["EventTime"] for e in raw]
    assert times == sorted(times)
    lo, hi = times[1], times[-2]
    body = _raw_list(sim_server, ClusterName="filt", SortOrder="Ascending", EventTimeAfter=lo,
                     EventTimeBefore=hi).json()
    assert [e["EventId"] for e in body["Events"]] == [e["EventId"] for e in raw if lo < e["EventTime"] < hi]
    # boto3 datetimes (whole seconds on the wire)
    now = datetime.now(UTC)
    assert _all(client, "filt", EventTimeAfter=now + timedelta(hours=1)) == []
    assert _all(client, "filt", EventTimeBefore=now - timedelta(hours=1)) == []
    window = _all(client, "filt", EventTimeAfter=now - timedelta(hours=1), EventTimeBefore=now + timedelta(hours=1))
    assert len(window) == len(evs)


def test_default_order_is_descending(client: Any) -> None:
    _make(client, "order", 1)
    asc = _settle(client, "order")
    desc = _all(client, "order")
    assert [e["EventId"] for e in desc] == [e["EventId"] for e in reversed(asc)]
    explicit = _all(client, "order", SortBy="EventTime", SortOrder="Descending")
    assert [e["EventId"] for e in explicit] == [e["EventId"] for e in desc]
    assert desc[-1]["Description"] == "Cluster order creation started successfully"


# ---- pagination ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["Descending", "Ascending"])
def test_pagination_max_results_2(sim_server: RunningServer, client: Any, order: str) -> None:
    arn = _make(client, "pages", 2)
    full = _settle(client, "pages")
    if order == "Descending":
        full = list(reversed(full))
    ids = [e["EventId"] for e in full]
    assert len(ids) >= 5

    paged: list[str] = []
    req: dict[str, Any] = {"ClusterName": "pages", "SortOrder": order, "MaxResults": 2}
    while True:
        resp = client.list_cluster_events(**req)
        assert len(resp["Events"]) <= 2
        paged += [e["EventId"] for e in resp["Events"]]
        if not resp.get("NextToken"):
            break
        req["NextToken"] = resp["NextToken"]
    assert paged == ids

    # stable under concurrent inserts: new events between pages neither repeat nor skip anything
    first = client.list_cluster_events(ClusterName="pages", SortOrder=order, MaxResults=2)
    got = [e["EventId"] for e in first["Events"]]
    token = first["NextToken"]
    inserted: list[str] = []
    rounds = 0
    while token:
        if rounds < 3:  # (inserting on every page would keep an ascending listing going forever)
            inserted += [e.event_id for e in _insert(sim_server, arn, 2)]
        rounds += 1
        resp = client.list_cluster_events(ClusterName="pages", SortOrder=order, MaxResults=2, NextToken=token)
        got += [e["EventId"] for e in resp["Events"]]
        token = resp.get("NextToken")
    assert len(got) == len(set(got))
    if order == "Descending":  # newest first: the new events are ahead of the cursor
        assert got == ids
    else:  # oldest first: every new event shows up at the end, in order
        assert got == ids + inserted


def test_token_bound_to_filters(client: Any) -> None:
    _make(client, "tok", 2)
    resp = client.list_cluster_events(ClusterName="tok", MaxResults=1)
    with pytest.raises(ClientError) as info:
        client.list_cluster_events(ClusterName="tok", MaxResults=1, SortOrder="Ascending",
                                   NextToken=resp["NextToken"])
    assert _code(info) == "ValidationException"
    with pytest.raises(ClientError) as info:
        client.list_cluster_events(ClusterName="tok", NextToken="garbage!")
    assert _code(info) == "ValidationException"


@pytest.mark.parametrize("value,bound", [(0, "greater than or equal to 1"), (101, "less than or equal to 100")])
def test_max_results_out_of_range(sim_server: RunningServer, client: Any, value: int, bound: str) -> None:
    _make(client, "mr", 1)
    r = _raw_list(sim_server, ClusterName="mr", MaxResults=value)
    assert r.status_code == 400
    body = r.json()
    assert body["__type"].endswith("ValidationException")
    assert f"Value '{value}' at 'maxResults' failed to satisfy constraint: Member must have value {bound}" in (
        body.get("message") or body.get("Message"))
    with pytest.raises(ClientError) as info:
        sim_server.client(validate=False).list_cluster_events(ClusterName="mr", MaxResults=value)
    assert _code(info) == "ValidationException"


# ---- describe, names, errors ------------------------------------------------------------------------------


def test_describe_event_by_name_and_arn(client: Any) -> None:
    arn = _make(client, "desc", 1)
    evs = _settle(client, "desc")
    for e in evs:
        for ref in ("desc", arn):
            d = client.describe_cluster_event(ClusterName=ref, EventId=e["EventId"])["EventDetails"]
            for key in ("EventId", "ClusterArn", "ClusterName", "ResourceType", "EventTime", "Description",
                        "EventLevel", "InstanceGroupName", "InstanceId"):
                assert d.get(key) == e.get(key), key
    assert [e["EventId"] for e in _all(client, arn, SortOrder="Ascending")] == [e["EventId"] for e in evs]
    prov = next(e for e in evs if "successfully provisioned" in e["Description"])
    d = client.describe_cluster_event(ClusterName="desc", EventId=prov["EventId"])["EventDetails"]
    assert re.fullmatch(r"[a-z-]+-\d+", d["EventDetails"]["EventMetadata"]["Instance"]["NodeLogicalId"])


def test_unknown_event_and_cluster(client: Any) -> None:
    _make(client, "unk", 1)
    with pytest.raises(ClientError) as info:
        client.describe_cluster_event(ClusterName="unk", EventId=str(uuid.uuid4()))
    assert _code(info) == "ResourceNotFound"
    with pytest.raises(ClientError) as info:
        client.list_cluster_events(ClusterName="nope")
    assert _code(info) == "ResourceNotFound"
    with pytest.raises(ClientError) as info:
        client.describe_cluster_event(ClusterName="nope", EventId=str(uuid.uuid4()))
    assert _code(info) == "ResourceNotFound"
    with pytest.raises(ClientError) as info:
        client.list_cluster_events(ClusterName="arn:aws:sagemaker:us-east-1:123456789012:cluster/zzzzzzzzzzzz")
    assert _code(info) == "ResourceNotFound"
    # events of another cluster are not visible through this one
    _make(client, "unk2", 1)
    other = _all(client, "unk2")[0]["EventId"]
    with pytest.raises(ClientError) as info:
        client.describe_cluster_event(ClusterName="unk", EventId=other)
    assert _code(info) == "ResourceNotFound"


def test_event_metadata_union_members(sim_server: RunningServer, client: Any) -> None:
    arn = _make(client, "meta", 1)
    cases = [
        (ResourceType.CLUSTER, EventDetails("c-boom"), {"Cluster": {"FailureMessage": "c-boom"}}),
        (ResourceType.INSTANCE_GROUP, EventDetails("g-boom"), {"InstanceGroup": {"FailureMessage": "g-boom"}}),
        (ResourceType.INSTANCE_GROUP, EventDetails(scaling=GroupScaling(1, 2, 1)),
         {"InstanceGroupScaling": {"InstanceCount": 1, "TargetCount": 2, "MinCount": 1}}),
        (ResourceType.INSTANCE, EventDetails("i-boom"), {"Instance": {"FailureMessage": "i-boom"}}),
        # rows written before EventDetails kept wire-keyed details: still read
        (ResourceType.INSTANCE_GROUP, EventDetails.from_dict({"FailureMessage": "old", "NotAMember": 1}),
         {"InstanceGroup": {"FailureMessage": "old"}}),
        (ResourceType.CLUSTER, EventDetails.from_dict({"Bogus": "x"}), None),
        (ResourceType.CLUSTER, EventDetails(), None),
    ]
    for rtype, details, want in cases:
        ev = _insert(sim_server, arn, 1, resource_type=rtype, details=details,
                     group=None if rtype == ResourceType.CLUSTER else "compute-group")[0]
        d = client.describe_cluster_event(ClusterName="meta", EventId=ev.event_id)["EventDetails"]
        assert d.get("EventDetails", {}).get("EventMetadata") == want, (rtype, details)


def test_strict_compat_requires_continuous(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated",
                        reconcile_interval=0.1, simulated_launch_delay=0.01, compat="strict")
    with thread_server(settings) as srv:
        client = srv.client()
        _make_plain = client.create_cluster(ClusterName="plain", InstanceGroups=seed_groups(1))
        assert _make_plain["ClusterArn"]
        with pytest.raises(ClientError) as info:
            client.list_cluster_events(ClusterName="plain")
        assert _code(info) == "ValidationException"
        assert _msg(info) == (
            "ListClusterEvents is only supported for cluster with NodeProvisioningMode set to Continuous")
        with pytest.raises(ClientError) as info:
            client.describe_cluster_event(ClusterName="plain", EventId=str(uuid.uuid4()))
        assert _code(info) == "ValidationException"
        assert _msg(info) == (
            "DescribeClusterEvent is only supported for cluster with NodeProvisioningMode set to Continuous")
        with pytest.raises(ClientError) as info:
            client.list_cluster_events(ClusterName="missing")
        assert _code(info) == "ResourceNotFound"

        _make(client, "cont", 1, NodeProvisioningMode="Continuous")
        evs = _all(client, "cont")
        assert evs and evs[-1]["Description"] == "Cluster cont creation started successfully"
        d = client.describe_cluster_event(ClusterName="cont", EventId=evs[0]["EventId"])
        assert d["EventDetails"]["EventId"] == evs[0]["EventId"]


# ---- the CLI ----------------------------------------------------------------------------------------------------


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmpod.cli", "events", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


LINE_RE = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (Info|Warn|Error)\s+(Cluster|InstanceGroup|Instance)\s+(.*)$")


def test_cli_prints_events_oldest_first(sim_server: RunningServer, client: Any) -> None:
    _make(client, "clie", 2)
    evs = _settle(client, "clie")
    r = _cli("clie", "--endpoint-url", sim_server.endpoint)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(evs)
    parsed = [LINE_RE.match(line) for line in lines]
    assert all(parsed), lines
    assert [p.group(1) for p in parsed if p] == sorted(p.group(1) for p in parsed if p)
    assert lines[0].endswith("Cluster clie creation started successfully")
    assert " Cluster       Cluster clie creation started successfully" in lines[0]
    for line, e in zip(lines, evs, strict=True):
        tail = " ".join(x for x in (e.get("InstanceGroupName"), e.get("InstanceId"), e["Description"]) if x)
        assert line.endswith(tail)

    r = _cli("clie", "--endpoint-url", sim_server.endpoint, "--limit", "2")
    assert r.returncode == 0 and r.stdout.splitlines() == lines[-2:]

    r = _cli("clie", "--endpoint-url", sim_server.endpoint, "--group", "controller-group")
    assert r.returncode == 0
    assert r.stdout.splitlines() and all(" controller-group " in line for line in r.stdout.splitlines())

    node = next(e["InstanceId"] for e in evs if e.get("InstanceId"))
    r = _cli("clie", "--endpoint-url", sim_server.endpoint, "--node", node)
    assert r.returncode == 0
    assert r.stdout.splitlines() and all(f" {node} " in line for line in r.stdout.splitlines())


def test_cli_errors(sim_server: RunningServer) -> None:
    r = _cli("ghost", "--endpoint-url", sim_server.endpoint)
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.strip() == f"slurmpod: cluster ghost not found at {sim_server.endpoint}"

    dead = f"http://127.0.0.1:{free_port()}"
    r = _cli("ghost", "--endpoint-url", dead)
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"slurmpod: cannot reach the slurmpod API at {dead}")


def test_cli_follow(sim_server: RunningServer, client: Any) -> None:
    _make(client, "fol", 1)
    before = _settle(client, "fol")
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurmpod.cli", "events", "fol", "--endpoint-url", sim_server.endpoint, "--follow"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Ctrl-C as at a terminal: a suite started in the background by a shell inherits SIGINT ignored (bash
        # does that to asynchronous commands), and Python keeps an ignored SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    got: list[str] = []

    def read_until(pred: Callable[[list[str]], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not pred(got):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"follow output so far: {got}")
            try:
                got.append(lines.get(timeout=remaining))
            except queue.Empty:
                continue

    try:
        read_until(lambda g: len(g) >= len(before))
        assert got[0].endswith("Cluster fol creation started successfully")
        client.update_cluster(ClusterName="fol", InstanceGroups=seed_groups(2))
        read_until(lambda g: any(x.endswith("Cluster fol update completed successfully") for x in g))
        assert any(x.endswith("Cluster fol update started successfully") for x in got)
        assert any("successfully provisioned in Cluster fol and IG compute-group" in x for x in got[len(before):])
        final = _settle(client, "fol")
        read_until(lambda g: len(g) >= len(final))
        time.sleep(2.5)  # a few more polls: nothing is printed twice
        while not lines.empty():
            got.append(lines.get_nowait())
        assert len(got) == len(set(got)), got
        assert len(got) == len(final)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate(timeout=5)
    assert proc.returncode == 130
    assert "Traceback" not in err
