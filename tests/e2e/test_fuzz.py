"""Property-based fuzzing over real HTTP: whatever arrives, the server answers < 500 with a proper error body.

Five generators send well over 2,000 requests in total (each test asserts how many it actually sent):
random JSON values, random nested structures built from real member names, mutated valid
CreateCluster and UpdateCluster bodies (wrong types, huge strings, unicode and control characters,
deleted and unknown members), and random bytes with random headers. Valid CreateCluster bodies do
create clusters; their names are random so they never clash on purpose.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmpod.settings import Settings
from tests.serverproc import ROLE, free_port, seed_groups, thread_server, wait_status

OPS = ("CreateCluster", "UpdateCluster", "DescribeCluster", "ListClusters", "DeleteCluster", "ListClusterNodes",
       "DescribeClusterNode", "BatchDeleteClusterNodes")
TARGETS = tuple(f"SageMaker.{op}" for op in OPS)
CONTENT_TYPES = ("application/x-amz-json-1.1", "application/x-amz-json-1.0", "application/json",
                 "application/x-amz-json-1.1; charset=utf-8", "text/plain", "", "application/octet-stream")
MEMBERS = ("ClusterName", "InstanceGroups", "InstanceGroupName", "InstanceCount", "InstanceType", "ExecutionRole",
           "SlurmConfig", "NodeType", "PartitionNames", "LifeCycleConfig", "SourceS3Uri", "OnCreate",
           "OnInitComplete", "ThreadsPerCore", "Orchestrator", "Slurm", "SlurmConfigStrategy", "NodeRecovery",
           "NodeProvisioningMode", "MinInstanceCount", "InstanceGroupsToDelete", "NodeIds", "NodeId",
           "NodeLogicalId", "NodeLogicalIds", "MaxResults", "NextToken", "SortBy", "SortOrder", "NameContains",
           "CreationTimeAfter", "CreationTimeBefore", "InstanceGroupNameContains", "Tags", "Key", "Value",
           "VpcConfig", "Subnets", "SecurityGroupIds", "ImageId", "IncludeNodeLogicalIds")
EXISTING = "fz-existing"


def _settings(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


class Fuzzer:
    """Sends requests over one keep-alive session and checks every response."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint + "/"
        self.session = requests.Session()
        self.statuses: Counter[int] = Counter()

    def send(self, target: str | None, data: bytes, content_type: str = "application/x-amz-json-1.1") -> Any:
        headers = {"Content-Type": content_type}
        if target is not None:
            headers["X-Amz-Target"] = target
        resp = self.session.post(self.endpoint, data=data, headers=headers, timeout=30)
        self.check(resp, target, data)
        return resp

    def check(self, resp: requests.Response, target: str | None, data: bytes) -> None:
        self.statuses[resp.status_code] += 1
        where = f"{target} {data[:300]!r}"
        assert resp.status_code < 500, f"{resp.status_code} {resp.text[:500]} for {where}"
        body = resp.json()
        assert isinstance(body, dict), where
        if resp.status_code >= 400:
            assert set(body) == {"__type", "message"}, f"{body} for {where}"
            assert isinstance(body["__type"], str) and body["__type"], where
            assert isinstance(body["message"], str), where
            assert "Traceback" not in body["message"], where
        else:
            assert resp.status_code == 200, where
        assert resp.headers.get("x-amzn-RequestId"), where


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzer]:
    state = Path(tmp_path_factory.mktemp("fuzz")) / "state"
    cfg = Settings(state_dir=state, port=free_port(), provider="simulated", reconcile_interval=0.2,
                   simulated_launch_delay=0.0)
    with thread_server(cfg) as server:
        client = server.client()
        client.create_cluster(ClusterName=EXISTING, InstanceGroups=seed_groups(2))
        wait_status(client, EXISTING, {"InService"})
        f = Fuzzer(server.endpoint)
        yield f
        f.session.close()


# ---- strategies ---------------------------------------------------------------------------------

_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8", categories=["Cc", "Cf", "Zs", "So", "Lo"]), max_size=20),
    st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=3),  # lone surrogates
    st.sampled_from(["", " ", "\x00", "null", "dev", "Controller", "ml.t3.medium", "i-0123456789abcdef0",
                     "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefabcdef", EXISTING, "../../etc/passwd",
                     "s3://bucket/x", "file:///etc", "${jndi:x}", "' OR 1=1 --"]),
    st.integers(1, 5000).map(lambda n: "x" * n),
    st.integers(1, 2000).map(lambda n: "\u00e9\U0001f600" * n),
)
_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), _text,
)
json_values = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.sampled_from(MEMBERS), st.text(max_size=10)), inner, max_size=6),
    ),
    max_leaves=25,
)
member_structs = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(MEMBERS), inner, max_size=6)),
    max_leaves=30,
)
garbage = st.one_of(
    _scalar,
    st.lists(_scalar, max_size=4),
    st.dictionaries(st.sampled_from(MEMBERS), _scalar, max_size=3),
    st.integers(101, 10**6).map(lambda n: ["i-0123456789abcdef0"] * (n % 150)),
)


def _group(name: str, node_type: str, count: int, partition: str | None = None) -> dict[str, Any]:
    sc: dict[str, Any] = {"NodeType": node_type}
    if partition:
        sc["PartitionNames"] = [partition]
    return {"InstanceGroupName": name, "InstanceType": "ml.t3.medium", "InstanceCount": count, "ThreadsPerCore": 1,
            "ExecutionRole": ROLE, "SlurmConfig": sc,
            "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-bucket/base-config/", "OnCreate": "on_create.sh"}}


def _valid_create(name: str) -> dict[str, Any]:
    return {
        "ClusterName": name,
        "InstanceGroups": [_group("controller-group", "Controller", 1), _group("compute-group", "Compute", 1, "c")],
        "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Managed"}},
        "VpcConfig": {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
        "Tags": [{"Key": "Project", "Value": "fuzz"}],
    }


def _valid_update() -> dict[str, Any]:
    return {
        "ClusterName": EXISTING,
        "InstanceGroups": [
            _group("controller-group", "Controller", 1),
            _group("compute-group", "Compute", 2, "compute"),
            _group("extra-group", "Compute", 1, "extra"),
        ],
        "InstanceGroupsToDelete": [],
        "NodeRecovery": "Automatic",
    }


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(doc: dict[str, Any], picks: list[tuple[int, str, Any, str]]) -> dict[str, Any]:
    """Applies (path index, action, value, unknown key) mutations to a deep copy of ``doc``."""
    doc = copy.deepcopy(doc)
    for index, action, value, unknown in picks:
        paths = _paths(doc)
        if not paths:
            break
        path = paths[index % len(paths)]
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if action == "replace":
            parent[last] = value
        elif action == "delete":
            del parent[last]
        elif action == "unknown" and isinstance(parent, dict):
            parent[unknown or "Bogus"] = value
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[last]))
        elif action == "wrap":
            parent[last] = [parent[last]]
    return doc


mutations = st.lists(
    st.tuples(st.integers(0, 10_000), st.sampled_from(["replace", "replace", "delete", "unknown", "duplicate", "wrap"]),
              garbage, st.text(max_size=8)),
    min_size=1, max_size=4,
)


def _encode(body: Any) -> bytes:
    return json.dumps(body).encode()


# ---- tests --------------------------------------------------------------------------------------


def _run(test: Any, expected: int) -> None:
    count = [0]
    test(count)
    assert count[0] >= expected, f"only {count[0]} examples ran"


def test_fuzz_random_json_values(fuzzer: Fuzzer) -> None:
    @_settings(450)
    @given(target=st.sampled_from(TARGETS), body=json_values)
    def run(count: list[int], target: str, body: Any) -> None:
        count[0] += 1
        fuzzer.send(target, _encode(body))

    _run(run, 450)


def test_fuzz_random_member_structures(fuzzer: Fuzzer) -> None:
    @_settings(450)
    @given(target=st.sampled_from(TARGETS), body=st.dictionaries(st.sampled_from(MEMBERS), member_structs, max_size=6))
    def run(count: list[int], target: str, body: Any) -> None:
        count[0] += 1
        fuzzer.send(target, _encode(body))

    _run(run, 450)


def test_fuzz_mutated_create_cluster(fuzzer: Fuzzer) -> None:
    @_settings(500)
    @given(name=st.from_regex(r"fz-[a-z0-9]{10}", fullmatch=True), picks=mutations)
    def run(count: list[int], name: str, picks: list[tuple[int, str, Any, str]]) -> None:
        count[0] += 1
        fuzzer.send("SageMaker.CreateCluster", _encode(_mutate(_valid_create(name), picks)))

    _run(run, 500)


def test_fuzz_mutated_update_cluster(fuzzer: Fuzzer) -> None:
    @_settings(400)
    @given(picks=mutations)
    def run(count: list[int], picks: list[tuple[int, str, Any, str]]) -> None:
        count[0] += 1
        fuzzer.send("SageMaker.UpdateCluster", _encode(_mutate(_valid_update(), picks)))

    _run(run, 400)


def test_fuzz_random_bytes_and_headers(fuzzer: Fuzzer) -> None:
    # Header values stay printable ASCII: anything else is malformed HTTP that uvicorn itself refuses.
    header_text = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)
    targets = st.one_of(st.sampled_from(TARGETS), st.none(), header_text, header_text.map("SageMaker.".__add__),
                        st.sampled_from(["SageMaker.Nope", "Foo.Bar", "SageMaker.ListModels"]))

    @_settings(400)
    @given(target=targets, data=st.one_of(st.binary(max_size=300), json_values.map(_encode)),
           content_type=st.sampled_from(CONTENT_TYPES))
    def run(count: list[int], target: str | None, data: bytes, content_type: str) -> None:
        count[0] += 1
        fuzzer.send(target, data, content_type)

    _run(run, 400)


def test_fuzz_left_server_healthy(fuzzer: Fuzzer) -> None:
    """After (or without) the fuzzing, the server still answers normally and the seeded cluster is intact."""
    resp = fuzzer.send("SageMaker.DescribeCluster", _encode({"ClusterName": EXISTING}))
    assert resp.status_code == 200
    assert resp.json()["ClusterName"] == EXISTING
    ok = requests.get(fuzzer.endpoint + "healthz", timeout=10)
    assert ok.status_code == 200
