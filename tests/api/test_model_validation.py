"""Tests for slurmpod.api.model: input validation against the botocore model, output shaping."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmpod.api import model
from slurmpod.api.model import (
    OutputShapeError,
    check_input,
    compile_pattern,
    conform_output,
    format_validation_error,
    get_model,
    operation_names,
    raise_for_input,
    render_value,
    validate_input,
)
from slurmpod.domain.status import ClusterStatus
from slurmpod.errors import SerializationException, UnknownOperationException, ValidationException

ROLE = "arn:aws:iam::123456789012:role/hyperpod-api-driven-exec-role"
BUCKET = "s3://sagemaker-hyperpod-api-driven-lcc-b466065b/base-config/"
NAME_PATTERN = "[a-zA-Z0-9](-*[a-zA-Z0-9])*"
NAME_OR_ARN_PATTERN = (
    "((arn:aws[a-z\\-]*:sagemaker:[a-z0-9\\-]*:[0-9]{12}:cluster/[a-z0-9]{12})"
    "|([a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}))"
)
NODE_ID_PATTERN = "i-[a-f0-9]{8}(?:[a-f0-9]{9})?"
PREFIX = "failed to satisfy constraint: Member must"


def _group(name: str, node_type: str, count: int, partitions: list[str] | None = None) -> dict[str, Any]:
    slurm: dict[str, Any] = {"NodeType": node_type}
    if partitions is not None:
        slurm["PartitionNames"] = partitions
    return {
        "InstanceGroupName": name,
        "InstanceType": "ml.t3.medium",
        "InstanceCount": count,
        "ThreadsPerCore": 1,
        "ExecutionRole": ROLE,
        "SlurmConfig": slurm,
        "LifeCycleConfig": {"SourceS3Uri": BUCKET, "OnCreate": "on_create.sh"},
    }


# Seed 000's scripts/create_cluster.json, with the shell variables filled in.
SEED_CREATE: dict[str, Any] = {
    "ClusterName": "hyperpod-api-driven-cluster",
    "InstanceGroups": [
        _group("controller-group", "Controller", 1),
        _group("compute-group", "Compute", 2, ["compute"]),
    ],
    "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Managed"}},
    "VpcConfig": {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
    "Tags": [
        {"Key": "Project", "Value": "hyperpod-api-driven-blog"},
        {"Key": "ManagedBy", "Value": "manual"},
    ],
}
# Seed 000's scripts/update_cluster.json.
SEED_UPDATE: dict[str, Any] = {
    "ClusterName": "hyperpod-api-driven-cluster",
    "InstanceGroups": [
        _group("controller-group", "Controller", 1),
        _group("compute-group", "Compute", 2, ["compute"]),
        _group("extra-group", "Compute", 1, ["extra"]),
    ],
}


def _with(base: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A deep copy of ``base`` with ``path`` (``A.0.B``) set to ``value``; ``...`` deletes it."""
    doc = copy.deepcopy(base)
    *parents, last = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


def _enum(shape: str) -> str:
    return ", ".join(get_model().botocore_model.shape_for(shape).enum)


def _v(value: str, path: str, rule: str) -> str:
    return f"Value {value} at '{path}' {PREFIX} {rule}"


IG = "instanceGroups.1.member"
C = SEED_CREATE
INVALID: list[tuple[str, object, list[str]]] = [
    # CreateCluster
    ("CreateCluster", {}, [_v("null", "clusterName", "not be null")]),
    ("CreateCluster", _with(C, "ClusterName", ...), [_v("null", "clusterName", "not be null")]),
    ("CreateCluster", _with(C, "ClusterName", None), [_v("null", "clusterName", "not be null")]),
    (
        "CreateCluster",
        _with(C, "ClusterName", ""),
        [
            _v("''", "clusterName", "have length greater than or equal to 1"),
            _v("''", "clusterName", f"satisfy regular expression pattern: {NAME_PATTERN}"),
        ],
    ),
    (
        "CreateCluster",
        _with(C, "ClusterName", "x" * 64),
        [_v(f"'{'x' * 64}'", "clusterName", "have length less than or equal to 63")],
    ),
    (
        "CreateCluster",
        _with(C, "ClusterName", "bad name!"),
        [_v("'bad name!'", "clusterName", f"satisfy regular expression pattern: {NAME_PATTERN}")],
    ),
    ("CreateCluster", _with(C, "ClusterName", 5), [_v("'5'", "clusterName", "be of type string")]),
    (
        "CreateCluster",
        _with(C, "InstanceGroups", []),
        [_v("'[]'", "instanceGroups", "have length greater than or equal to 1")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups", "groups"),
        [_v("'groups'", "instanceGroups", "be of type list")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceType", "ml.x"),
        [_v("'ml.x'", f"{IG}.instanceType", f"satisfy enum value set: [{_enum('ClusterInstanceType')}]")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceCount", 7000),
        [_v("'7000'", f"{IG}.instanceCount", "have value less than or equal to 6758")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceCount", -1),
        [_v("'-1'", f"{IG}.instanceCount", "have value greater than or equal to 0")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceCount", "2"),
        [_v("'2'", f"{IG}.instanceCount", "be of type integer")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceCount", 1.5),
        [_v("'1.5'", f"{IG}.instanceCount", "be of type integer")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceCount", True),
        [_v("'true'", f"{IG}.instanceCount", "be of type integer")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceCount", 2**31),
        [_v(f"'{2**31}'", f"{IG}.instanceCount", "be of type integer")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.1.ThreadsPerCore", 3),
        [_v("'3'", "instanceGroups.2.member.threadsPerCore", "have value less than or equal to 2")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.ThreadsPerCore", 0),
        [_v("'0'", f"{IG}.threadsPerCore", "have value greater than or equal to 1")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceGroupName", ...),
        [_v("null", f"{IG}.instanceGroupName", "not be null")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.ExecutionRole", "role"),
        [
            _v("'role'", f"{IG}.executionRole", "have length greater than or equal to 20"),
            _v(
                "'role'",
                f"{IG}.executionRole",
                "satisfy regular expression pattern: "
                "arn:aws[a-z\\-]*:iam::\\d{12}:role/?[a-zA-Z_0-9+=,.@\\-_/]+",
            ),
        ],
    ),
    ("CreateCluster", _with(C, "InstanceGroups.0.Foo", 1), [f"Unknown member 'Foo' at '{IG}'"]),
    ("CreateCluster", _with(C, "Bogus", {}), ["Unknown member 'Bogus'"]),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.SlurmConfig.NodeType", "Worker"),
        [
            _v(
                "'Worker'",
                f"{IG}.slurmConfig.nodeType",
                "satisfy enum value set: [Controller, Login, Compute]",
            )
        ],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.SlurmConfig", {}),
        [_v("null", f"{IG}.slurmConfig.nodeType", "not be null")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.1.SlurmConfig.PartitionNames", ["a", "b"]),
        [
            _v(
                "'[a, b]'",
                "instanceGroups.2.member.slurmConfig.partitionNames",
                "have length less than or equal to 1",
            )
        ],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.1.SlurmConfig.PartitionNames", ["bad_name"]),
        [
            _v(
                "'bad_name'",
                "instanceGroups.2.member.slurmConfig.partitionNames.1.member",
                f"satisfy regular expression pattern: {NAME_PATTERN}",
            )
        ],
    ),
    (
        "CreateCluster",
        _with(C, "Orchestrator.Slurm.SlurmConfigStrategy", "Auto"),
        [
            _v(
                "'Auto'",
                "orchestrator.slurm.slurmConfigStrategy",
                "satisfy enum value set: [Overwrite, Managed, Merge]",
            )
        ],
    ),
    ("CreateCluster", _with(C, "VpcConfig.Subnets", ...), [_v("null", "vpcConfig.subnets", "not be null")]),
    (
        "CreateCluster",
        _with(C, "VpcConfig.SecurityGroupIds", []),
        [_v("'[]'", "vpcConfig.securityGroupIds", "have length greater than or equal to 1")],
    ),
    ("CreateCluster", _with(C, "VpcConfig", "vpc"), [_v("'vpc'", "vpcConfig", "be of type structure")]),
    (
        "CreateCluster",
        _with(C, "Tags.0.Key", ""),
        [_v("''", "tags.1.member.key", "have length greater than or equal to 1")],
    ),
    (
        "CreateCluster",
        _with(C, "Tags.1.Key", "k!"),
        [
            _v(
                "'k!'",
                "tags.2.member.key",
                "satisfy regular expression pattern: ([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)",
            )
        ],
    ),
    ("CreateCluster", _with(C, "Tags.0.Value", ...), [_v("null", "tags.1.member.value", "not be null")]),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.LifeCycleConfig.SourceS3Uri", "ftp://host/x"),
        [
            _v(
                "'ftp://host/x'",
                f"{IG}.lifeCycleConfig.sourceS3Uri",
                "satisfy regular expression pattern: (https|s3)://([^/]+)/?(.*)",
            )
        ],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.LifeCycleConfig.OnCreate", ""),
        [
            _v("''", f"{IG}.lifeCycleConfig.onCreate", "have length greater than or equal to 1"),
            _v("''", f"{IG}.lifeCycleConfig.onCreate", "satisfy regular expression pattern: [\\S\\s]+"),
        ],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceStorageConfigs", [{}]),
        [_v("'{}'", f"{IG}.instanceStorageConfigs.1.member", "have exactly one member set")],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.InstanceStorageConfigs", [{"EbsVolumeConfig": {"VolumeSizeInGB": 0}}]),
        [
            _v(
                "'0'",
                f"{IG}.instanceStorageConfigs.1.member.ebsVolumeConfig.volumeSizeInGB",
                "have value greater than or equal to 1",
            )
        ],
    ),
    (
        "CreateCluster",
        _with(C, "InstanceGroups.0.ImageId", "ami-1"),
        [
            _v("'ami-1'", f"{IG}.imageId", "have length greater than or equal to 7"),
            _v(
                "'ami-1'",
                f"{IG}.imageId",
                "satisfy regular expression pattern: (ami-[0-9a-fA-F]{8,17}|default)",
            ),
        ],
    ),
    ("CreateCluster", [], ["Request body must be a JSON object"]),
    # UpdateCluster
    ("UpdateCluster", _with(SEED_UPDATE, "ClusterName", ...), [_v("null", "clusterName", "not be null")]),
    (
        "UpdateCluster",
        _with(SEED_UPDATE, "InstanceGroupsToDelete", ["bad!"]),
        [
            _v(
                "'bad!'",
                "instanceGroupsToDelete.1.member",
                f"satisfy regular expression pattern: {NAME_PATTERN}",
            )
        ],
    ),
    (
        "UpdateCluster",
        _with(SEED_UPDATE, "NodeRecovery", "Sometimes"),
        [_v("'Sometimes'", "nodeRecovery", "satisfy enum value set: [Automatic, None]")],
    ),
    (
        "UpdateCluster",
        _with(SEED_UPDATE, "ClusterName", "arn:aws:sagemaker:us-east-1:123:cluster/abc"),
        [
            _v(
                "'arn:aws:sagemaker:us-east-1:123:cluster/abc'",
                "clusterName",
                f"satisfy regular expression pattern: {NAME_OR_ARN_PATTERN}",
            )
        ],
    ),
    (
        "UpdateCluster",
        _with(SEED_UPDATE, "InstanceGroups.2.InstanceCount", None),
        [_v("null", "instanceGroups.3.member.instanceCount", "not be null")],
    ),
    # DescribeCluster
    (
        "DescribeCluster",
        {"ClusterName": "x" * 257},
        [_v(f"'{'x' * 197}...'", "clusterName", "have length less than or equal to 256")],
    ),
    ("DescribeCluster", {"ClusterName": None}, [_v("null", "clusterName", "not be null")]),
    ("DescribeCluster", {"ClusterName": ["a"]}, [_v("'[a]'", "clusterName", "be of type string")]),
    # ListClusters
    ("ListClusters", {"MaxResults": 0}, [_v("'0'", "maxResults", "have value greater than or equal to 1")]),
    (
        "ListClusters",
        {"MaxResults": 101},
        [_v("'101'", "maxResults", "have value less than or equal to 100")],
    ),
    (
        "ListClusters",
        {"SortBy": "SIZE"},
        [_v("'SIZE'", "sortBy", "satisfy enum value set: [CREATION_TIME, NAME]")],
    ),
    (
        "ListClusters",
        {"SortOrder": "Up"},
        [_v("'Up'", "sortOrder", "satisfy enum value set: [Ascending, Descending]")],
    ),
    (
        "ListClusters",
        {"CreationTimeAfter": "yesterday"},
        [_v("'yesterday'", "creationTimeAfter", "be of type timestamp")],
    ),
    (
        "ListClusters",
        {"CreationTimeBefore": True},
        [_v("'true'", "creationTimeBefore", "be of type timestamp")],
    ),
    (
        "ListClusters",
        {"NameContains": "a b"},
        [_v("'a b'", "nameContains", "satisfy regular expression pattern: [a-zA-Z0-9\\-]+")],
    ),
    (
        "ListClusters",
        {"NextToken": "x" * 8193},
        [_v(f"'{'x' * 197}...'", "nextToken", "have length less than or equal to 8192")],
    ),
    # ListClusterNodes
    ("ListClusterNodes", {}, [_v("null", "clusterName", "not be null")]),
    (
        "ListClusterNodes",
        {"ClusterName": "c", "InstanceGroupNameContains": ""},
        [
            _v("''", "instanceGroupNameContains", "have length greater than or equal to 1"),
            _v("''", "instanceGroupNameContains", f"satisfy regular expression pattern: {NAME_PATTERN}"),
        ],
    ),
    (
        "ListClusterNodes",
        {"ClusterName": "c", "IncludeNodeLogicalIds": "yes"},
        [_v("'yes'", "includeNodeLogicalIds", "be of type boolean")],
    ),
    (
        "ListClusterNodes",
        {"ClusterName": "c", "MaxResults": "10"},
        [_v("'10'", "maxResults", "be of type integer")],
    ),
    # DescribeClusterNode
    (
        "DescribeClusterNode",
        {"ClusterName": "c", "NodeId": "i-123"},
        [_v("'i-123'", "nodeId", f"satisfy regular expression pattern: {NODE_ID_PATTERN}")],
    ),
    (
        "DescribeClusterNode",
        {"ClusterName": "c", "NodeId": ""},
        [
            _v("''", "nodeId", "have length greater than or equal to 1"),
            _v("''", "nodeId", f"satisfy regular expression pattern: {NODE_ID_PATTERN}"),
        ],
    ),
    (
        "DescribeClusterNode",
        {"ClusterName": "c", "NodeLogicalId": "-a"},
        [
            _v(
                "'-a'",
                "nodeLogicalId",
                "satisfy regular expression pattern: [a-zA-Z0-9][a-zA-Z0-9\\-]*[a-zA-Z0-9]",
            )
        ],
    ),
    # BatchDeleteClusterNodes
    (
        "BatchDeleteClusterNodes",
        {"ClusterName": "c", "NodeIds": []},
        [_v("'[]'", "nodeIds", "have length greater than or equal to 1")],
    ),
    (
        "BatchDeleteClusterNodes",
        {"ClusterName": "c", "NodeIds": ["i-0123456789abcdef0", "i-zzzzzzzz"]},
        [_v("'i-zzzzzzzz'", "nodeIds.2.member", f"satisfy regular expression pattern: {NODE_ID_PATTERN}")],
    ),
    ("BatchDeleteClusterNodes", {"NodeIds": ["i-01234567"]}, [_v("null", "clusterName", "not be null")]),
    # DeleteCluster
    ("DeleteCluster", {}, [_v("null", "clusterName", "not be null")]),
    (
        "DeleteCluster",
        {"ClusterName": "bad--"},
        [_v("'bad--'", "clusterName", f"satisfy regular expression pattern: {NAME_OR_ARN_PATTERN}")],
    ),
    ("DeleteCluster", {"ClusterName": "c", "Force": True}, ["Unknown member 'Force'"]),
    ("DeleteCluster", "c", ["Request body must be a JSON object"]),
]


@pytest.mark.parametrize(("operation", "params", "expected"), INVALID)
def test_validate_input_reports_aws_findings(operation: str, params: object, expected: list[str]) -> None:
    assert validate_input(operation, params) == expected


def test_validate_input_has_enough_cases() -> None:
    assert len(INVALID) >= 40


@pytest.mark.parametrize(
    ("operation", "params"),
    [
        ("CreateCluster", SEED_CREATE),
        ("UpdateCluster", SEED_UPDATE),
        ("DescribeCluster", {"ClusterName": "hyperpod-api-driven-cluster"}),
        (
            "DescribeCluster",
            {"ClusterName": "arn:aws:sagemaker:ap-northeast-1:123456789012:cluster/tyjxlpi1nicr"},
        ),
        ("ListClusters", {}),
        ("ListClusters", {"MaxResults": 10, "SortBy": "NAME", "CreationTimeAfter": 1700000000.5}),
        ("ListClusters", {"CreationTimeAfter": "2024-01-01T00:00:00Z", "NameContains": "hyper"}),
        ("ListClusterNodes", {"ClusterName": "c", "InstanceGroupNameContains": "compute-group"}),
        ("DescribeClusterNode", {"ClusterName": "c", "NodeId": "i-0fbd4b7ba6f3b477f"}),
        ("BatchDeleteClusterNodes", {"ClusterName": "c", "NodeIds": ["i-0fbd4b7ba6f3b477f"]}),
        ("DeleteCluster", {"ClusterName": "hyperpod-api-driven-cluster"}),
        ("CreateCluster", _with(SEED_CREATE, "Tags.0.Value", "日本語 value")),
    ],
)
def test_validate_input_accepts_valid_requests(operation: str, params: object) -> None:
    assert validate_input(operation, params) == []


def test_validate_input_large_list_renders_truncated_value() -> None:
    params = {"ClusterName": "c", "NodeIds": ["i-0123456789abcdef0"] * 3001}
    [finding] = validate_input("BatchDeleteClusterNodes", params)
    value, rest = finding.split("' at ", 1)
    assert value.startswith("Value '[i-0123456789abcdef0, i-0123456789abcdef0, ")
    assert value.endswith("...") and len(value) < 220
    assert rest == f"'nodeIds' {PREFIX} have length less than or equal to 3000"


def test_validate_input_too_many_groups() -> None:
    params = {**SEED_CREATE, "InstanceGroups": [_group(f"g{i}", "Compute", 1, ["p"]) for i in range(101)]}
    [finding] = validate_input("CreateCluster", params)
    assert finding.startswith("Value '[{InstanceGroupName=g0, InstanceType=ml.t3.medium, InstanceCount=1, ")
    assert finding.endswith(f"...' at 'instanceGroups' {PREFIX} have length less than or equal to 100")


def test_validate_input_findings_follow_model_member_order() -> None:
    params = {"SortOrder": "x", "MaxResults": 0, "NameContains": "!"}
    findings = validate_input("ListClusters", params)
    assert [f.split("' at '")[1].split("'")[0] for f in findings] == [
        "maxResults",
        "nameContains",
        "sortOrder",
    ]


def test_validate_input_caps_findings() -> None:
    params = {"ClusterName": "c", "NodeIds": ["bad"] * 500}
    assert len(validate_input("BatchDeleteClusterNodes", params)) == model.MAX_FINDINGS


def test_validate_input_file_uri_extension() -> None:
    params = _with(
        SEED_CREATE, "InstanceGroups.0.LifeCycleConfig.SourceS3Uri", "file:///srv/lcc/base-config/"
    )
    assert validate_input("CreateCluster", params) == []
    strict = validate_input("CreateCluster", params, extensions=False)
    assert strict == [
        _v(
            "'file:///srv/lcc/base-config/'",
            f"{IG}.lifeCycleConfig.sourceS3Uri",
            "satisfy regular expression pattern: (https|s3)://([^/]+)/?(.*)",
        )
    ]
    relative = _with(SEED_CREATE, "InstanceGroups.0.LifeCycleConfig.SourceS3Uri", "file://relative/x")
    assert len(validate_input("CreateCluster", relative)) == 1


def test_validate_input_file_uri_extension_only_for_lifecycle_source() -> None:
    params = {"NameContains": "file:///x"}
    assert len(validate_input("ListClusters", params)) == 1


def test_check_input_classifies_serialization_findings() -> None:
    findings = check_input("CreateCluster", _with(_with(C, "ClusterName", 5), "Extra", 1))
    assert [f.kind for f in findings] == ["serialization", "serialization"]
    findings = check_input("CreateCluster", _with(C, "ClusterName", "bad name!"))
    assert [f.kind for f in findings] == ["validation"]


def test_raise_for_input_picks_the_aws_error_code() -> None:
    raise_for_input("CreateCluster", SEED_CREATE)
    with pytest.raises(ValidationException) as exc:
        raise_for_input("CreateCluster", _with(C, "ClusterName", "bad name!"))
    assert exc.value.message == "1 validation error detected: " + _v(
        "'bad name!'", "clusterName", f"satisfy regular expression pattern: {NAME_PATTERN}"
    )
    with pytest.raises(SerializationException) as ser:
        raise_for_input(
            "CreateCluster",
            _with(_with(C, "ClusterName", "bad name!"), "InstanceGroups.0.InstanceCount", "x"),
        )
    assert ser.value.message == _v("'x'", f"{IG}.instanceCount", "be of type integer")


def test_unknown_operation_raises() -> None:
    with pytest.raises(UnknownOperationException):
        validate_input("FrobnicateCluster", {})


def test_format_validation_error() -> None:
    assert format_validation_error(["a"]) == "1 validation error detected: a"
    assert format_validation_error(["a", "b"]) == "2 validation errors detected: a; b"


def test_operation_names_and_model() -> None:
    names = operation_names()
    for op in (
        "CreateCluster",
        "UpdateCluster",
        "DescribeCluster",
        "ListClusters",
        "DeleteCluster",
        "ListClusterNodes",
        "DescribeClusterNode",
        "BatchDeleteClusterNodes",
        "UpdateClusterSoftware",
    ):
        assert op in names
        assert get_model().has_operation(op)
    assert not get_model().has_operation("Nope")
    assert get_model() is get_model()
    assert get_model().error_codes("CreateCluster") == {"ResourceInUse", "ResourceLimitExceeded"}


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        ("([\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)", "Été 12:x", "a!"),
        (
            "arn:[\\p{Alnum}\\-]+:lambda:[\\p{Alnum}\\-]+:[0-9]{12}:function:.*",
            "arn:aws:lambda:us-1:123456789012:function:f",
            "arn:aws:s3:x",
        ),
        ("[\\u0020-\\uD7FF\\uE000-\\uFFFD\\uD800\\uDC00-\\uDBFF\\uDFFF\\t]*", "ok \U0001f600", "\x01"),
        ("([\\p{L}\\p{Z}\\p{N}_.:\\/=+\\-@]*)${1,128}", "key", "k!"),
        ("\\d+", "123", "١٢٣"),
    ],
)
def test_compile_pattern_translates_java(pattern: str, good: str, bad: str) -> None:
    compiled = compile_pattern(pattern)
    assert compiled is not None
    assert compiled.fullmatch(good)
    assert not compiled.fullmatch(bad)


def test_compile_pattern_untranslatable_is_none() -> None:
    assert compile_pattern("[\\P{L}]") is None
    assert compile_pattern("(unclosed") is None


def test_every_model_pattern_compiles() -> None:
    shapes = get_model().botocore_model._shape_resolver._shape_map.values()
    failed = [s["pattern"] for s in shapes if "pattern" in s and compile_pattern(s["pattern"]) is None]
    assert failed == []


def test_render_value() -> None:
    assert render_value(None) == "null"
    assert render_value("x") == "'x'"
    assert render_value([1, "a", {"K": None}]) == "'[1, a, {K=null}]'"
    assert render_value("y" * 1000) == "'" + "y" * 197 + "...'"
    deep: list[Any] = []
    for _ in range(10_000):
        deep = [deep]
    assert len(render_value(deep)) < 220


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=30,
)
member_names = st.sampled_from(
    [
        "ClusterName",
        "InstanceGroups",
        "VpcConfig",
        "Tags",
        "Orchestrator",
        "InstanceCount",
        "InstanceGroupName",
        "SlurmConfig",
        "NodeType",
        "LifeCycleConfig",
        "SourceS3Uri",
        "Key",
        "Value",
        "NodeIds",
        "MaxResults",
    ]
)
shaped_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(member_names, children, max_size=5),
    max_leaves=40,
)
OPS = [
    "CreateCluster",
    "UpdateCluster",
    "DescribeCluster",
    "ListClusters",
    "ListClusterNodes",
    "DescribeClusterNode",
    "BatchDeleteClusterNodes",
    "DeleteCluster",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(OPS), params=json_values | shaped_values, strict=st.booleans())
def test_validate_input_never_raises(op: str, params: object, strict: bool) -> None:
    findings = validate_input(op, params, extensions=not strict)
    assert all(isinstance(f, str) for f in findings)
    assert len(findings) <= model.MAX_FINDINGS
    json.dumps(findings)


@settings(max_examples=100, deadline=None)
@given(group=st.dictionaries(member_names, shaped_values, max_size=6))
def test_validate_input_never_raises_inside_groups(group: dict[str, Any]) -> None:
    validate_input("CreateCluster", {"ClusterName": "c", "InstanceGroups": [group]})


# ------------------------------------------------------------------------------------------------ output

ARN = "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefabcdef"


def test_conform_output_converts_and_drops_none() -> None:
    created = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    out = conform_output(
        "DescribeCluster",
        {
            "ClusterArn": ARN,
            "ClusterName": "c",
            "ClusterStatus": ClusterStatus.IN_SERVICE,
            "CreationTime": created,
            "FailureMessage": None,
            "InstanceGroups": [],
        },
    )
    assert out == {
        "ClusterArn": ARN,
        "ClusterName": "c",
        "ClusterStatus": "InService",
        "CreationTime": created.timestamp(),
        "InstanceGroups": [],
    }
    assert type(out["ClusterStatus"]) is str
    json.dumps(out)


def test_conform_output_naive_datetime_is_utc() -> None:
    out = conform_output(
        "ListClusters",
        {
            "ClusterSummaries": [
                {
                    "ClusterArn": ARN,
                    "ClusterName": "c",
                    "ClusterStatus": "Creating",
                    "CreationTime": datetime(1970, 1, 1, 0, 1),
                }
            ]
        },
    )
    assert out["ClusterSummaries"] == [
        {"ClusterArn": ARN, "ClusterName": "c", "ClusterStatus": "Creating", "CreationTime": 60.0}
    ]


@pytest.mark.parametrize(
    ("operation", "data", "needle"),
    [
        (
            "DescribeCluster",
            {"ClusterArn": ARN, "ClusterStatus": "InService", "InstanceGroups": [], "Bogus": 1},
            "unknown member 'Bogus'",
        ),
        ("DescribeCluster", {"ClusterArn": ARN, "InstanceGroups": []}, "missing required ['ClusterStatus']"),
        (
            "DescribeCluster",
            {"ClusterArn": ARN, "ClusterStatus": None, "InstanceGroups": []},
            "missing required",
        ),
        (
            "DescribeCluster",
            {"ClusterArn": ARN, "ClusterStatus": "Happy", "InstanceGroups": []},
            "not in enum",
        ),
        (
            "DescribeCluster",
            {"ClusterArn": ARN, "ClusterStatus": "InService", "InstanceGroups": {}},
            "expected list",
        ),
        (
            "DescribeCluster",
            {
                "ClusterArn": ARN,
                "ClusterStatus": "InService",
                "InstanceGroups": [],
                "CreationTime": "yesterday",
            },
            "expected timestamp",
        ),
        (
            "DescribeCluster",
            {"ClusterArn": ARN, "ClusterStatus": "InService", "InstanceGroups": [{"CurrentCount": "1"}]},
            "InstanceGroups[0].CurrentCount",
        ),
        ("CreateCluster", {}, "missing required ['ClusterArn']"),
        (
            "ListClusterNodes",
            {"ClusterNodeSummaries": [{"InstanceGroupName": "g"}]},
            "ClusterNodeSummaries[0]",
        ),
    ],
)
def test_conform_output_rejects_drift(operation: str, data: dict[str, Any], needle: str) -> None:
    with pytest.raises(OutputShapeError, match=None) as exc:
        conform_output(operation, data)
    assert needle in str(exc.value)


def test_conform_output_nested_node_summary() -> None:
    out = conform_output(
        "ListClusterNodes",
        {
            "NextToken": None,
            "ClusterNodeSummaries": [
                {
                    "InstanceGroupName": "compute-group",
                    "InstanceId": "i-0fbd4b7ba6f3b477f",
                    "InstanceType": "ml.t3.medium",
                    "LaunchTime": 1700000000,
                    "InstanceStatus": {"Status": "Running", "Message": None},
                }
            ],
        },
    )
    assert out["ClusterNodeSummaries"] == [
        {
            "InstanceGroupName": "compute-group",
            "InstanceId": "i-0fbd4b7ba6f3b477f",
            "InstanceType": "ml.t3.medium",
            "LaunchTime": 1700000000,
            "InstanceStatus": {"Status": "Running"},
        }
    ]
    assert "NextToken" not in out
