"""Invalid input over real HTTP: every case answers 4xx with the exact AWS-style error, and changes nothing.

Each case is sent raw (``requests``) to a real uvicorn server with the simulated provider, so nothing on
the client side (botocore's own validation) hides what the server does. After every case the test checks
that the visible state (ListClusters and the seeded cluster's DescribeCluster) is unchanged.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from slurmpod.api.model import get_model
from slurmpod.api.pagination import encode_token
from slurmpod.settings import Settings
from tests.serverproc import ROLE, RunningServer, free_port, seed_groups, thread_server, wait_status

EXISTING = "inv-existing"
SM = "SageMaker."
PREFIX = "failed to satisfy constraint: Member must"
NAME_PATTERN = "[a-zA-Z0-9](-*[a-zA-Z0-9])*"
NAME_OR_ARN = (
    "((arn:aws[a-z\\-]*:sagemaker:[a-z0-9\\-]*:[0-9]{12}:cluster/[a-z0-9]{12})"
    "|([a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}))"
)
NODE_ID_PATTERN = "i-[a-f0-9]{8}(?:[a-f0-9]{9})?"
ROLE_PATTERN = "arn:aws[a-z\\-]*:iam::\\d{12}:role/?[a-zA-Z_0-9+=,.@\\-_/]+"
S3_PATTERN = "(https|s3)://([^/]+)/?(.*)"
UNKNOWN_NODE = "i-0123456789abcdef0"
LIST_FILTERS = ("CreationTimeAfter", "CreationTimeBefore", "NameContains", "SortBy", "SortOrder")

Body = dict[str, Any] | list[Any] | str | bytes
BodyFn = Callable[[str], Body]  # the seeded cluster's ARN -> request body


def _enum(shape: str) -> str:
    return ", ".join(get_model().botocore_model.shape_for(shape).enum)


def _v(value: str, path: str, rule: str) -> str:
    """One model finding in AWS wording."""
    return f"Value {value} at '{path}' {PREFIX} {rule}"


def _verrs(*findings: str) -> str:
    n = len(findings)
    return f"{n} validation {'error' if n == 1 else 'errors'} detected: " + "; ".join(findings)


def _group(name: str, node_type: str | None, count: int = 1, partitions: list[str] | None = None,
           **extra: Any) -> dict[str, Any]:
    g: dict[str, Any] = {
        "InstanceGroupName": name, "InstanceType": "ml.t3.medium", "InstanceCount": count, "ExecutionRole": ROLE,
    }
    if node_type is not None:
        sc: dict[str, Any] = {"NodeType": node_type}
        if partitions is not None:
            sc["PartitionNames"] = partitions
        g["SlurmConfig"] = sc
    g.update(extra)
    return g


CTL = _group("controller-group", "Controller")
CMP = _group("compute-group", "Compute", 2, ["compute"])


def _create(*groups: dict[str, Any], name: str = "inv-new", **extra: Any) -> dict[str, Any]:
    return {"ClusterName": name, "InstanceGroups": [copy.deepcopy(g) for g in groups], **extra}


def _update(*groups: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"ClusterName": EXISTING, **extra}
    if groups:
        body["InstanceGroups"] = [copy.deepcopy(g) for g in groups]
    return body


def _set(base: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A deep copy of ``base`` with ``path`` (``A.0.B``) set to ``value``; ``...`` deletes the member."""
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


def _other_arn(arn: str, *, region: str | None = None, account: str | None = None) -> str:
    parts = arn.split(":")
    if region:
        parts[3] = region
    if account:
        parts[4] = account
    return ":".join(parts)


def _token(key: list[Any]) -> str:
    """A NextToken whose filter hash matches a ListClusters call without filters, but with a bogus key."""
    return encode_token(key, {k: None for k in LIST_FILTERS})


@dataclass(frozen=True)
class Case:
    id: str
    target: str | None
    body: Body | BodyFn
    code: str
    message: str
    match: str = "exact"  # exact | prefix | contains
    status: int = 400
    content_type: str = "application/x-amz-json-1.1"
    headers: dict[str, str] = field(default_factory=dict)


BASE = _create(CTL, CMP)
IG = "instanceGroups.1.member"
IG2 = "instanceGroups.2.member"

MODEL_CASES: list[Case] = [
    # ---- CreateCluster: required / length / pattern / type / enum / min-max / unknown members
    Case("create-empty-object", SM + "CreateCluster", {}, "ValidationException",
         _verrs(_v("null", "clusterName", "not be null"))),
    Case("create-null-name", SM + "CreateCluster", _set(BASE, "ClusterName", None), "ValidationException",
         _verrs(_v("null", "clusterName", "not be null"))),
    Case("create-empty-name", SM + "CreateCluster", _set(BASE, "ClusterName", ""), "ValidationException",
         _verrs(_v("''", "clusterName", "have length greater than or equal to 1"),
                _v("''", "clusterName", f"satisfy regular expression pattern: {NAME_PATTERN}"))),
    Case("create-name-too-long", SM + "CreateCluster", _set(BASE, "ClusterName", "x" * 64), "ValidationException",
         _verrs(_v(f"'{'x' * 64}'", "clusterName", "have length less than or equal to 63"))),
    Case("create-name-pattern", SM + "CreateCluster", _set(BASE, "ClusterName", "bad_name"), "ValidationException",
         _verrs(_v("'bad_name'", "clusterName", f"satisfy regular expression pattern: {NAME_PATTERN}"))),
    Case("create-name-arn-not-allowed", SM + "CreateCluster",
         _set(BASE, "ClusterName", "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefabcdef"),
         "ValidationException",
         _verrs(_v("'arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefabcdef'", "clusterName",
                   f"satisfy regular expression pattern: {NAME_PATTERN}"))),
    Case("create-name-wrong-type", SM + "CreateCluster", _set(BASE, "ClusterName", 5), "SerializationException",
         _v("'5'", "clusterName", "be of type string")),
    Case("create-groups-empty", SM + "CreateCluster", _set(BASE, "InstanceGroups", []), "ValidationException",
         _verrs(_v("'[]'", "instanceGroups", "have length greater than or equal to 1"))),
    Case("create-groups-not-list", SM + "CreateCluster", _set(BASE, "InstanceGroups", "groups"),
         "SerializationException", _v("'groups'", "instanceGroups", "be of type list")),
    Case("create-group-not-structure", SM + "CreateCluster", _set(BASE, "InstanceGroups", ["g"]),
         "SerializationException", _v("'g'", IG, "be of type structure")),
    Case("create-groups-too-many", SM + "CreateCluster",
         _create(*[_group(f"g{i}", None) for i in range(101)]), "ValidationException",
         "1 validation error detected: Value '[{InstanceGroupName=g0, ", "prefix"),
    Case("create-group-missing-required", SM + "CreateCluster", _set(BASE, "InstanceGroups", [{}]),
         "ValidationException",
         _verrs(_v("null", f"{IG}.instanceCount", "not be null"),
                _v("null", f"{IG}.instanceGroupName", "not be null"),
                _v("null", f"{IG}.executionRole", "not be null"))),
    Case("create-count-negative", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.InstanceCount", -1),
         "ValidationException", _verrs(_v("'-1'", f"{IG}.instanceCount", "have value greater than or equal to 0"))),
    Case("create-count-too-big", SM + "CreateCluster", _set(BASE, "InstanceGroups.1.InstanceCount", 6759),
         "ValidationException", _verrs(_v("'6759'", f"{IG2}.instanceCount", "have value less than or equal to 6758"))),
    Case("create-count-string", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.InstanceCount", "1"),
         "SerializationException", _v("'1'", f"{IG}.instanceCount", "be of type integer")),
    Case("create-count-float", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.InstanceCount", 1.5),
         "SerializationException", _v("'1.5'", f"{IG}.instanceCount", "be of type integer")),
    Case("create-count-bool", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.InstanceCount", True),
         "SerializationException", _v("'true'", f"{IG}.instanceCount", "be of type integer")),
    Case("create-count-huge-int", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.InstanceCount", 2**40),
         "SerializationException", _v(f"'{2**40}'", f"{IG}.instanceCount", "be of type integer")),
    Case("create-instance-type-enum", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.InstanceType", "ml.bogus"),
         "ValidationException",
         _verrs(_v("'ml.bogus'", f"{IG}.instanceType",
                   f"satisfy enum value set: [{_enum('ClusterInstanceType')}]"))),
    Case("create-group-name-pattern", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.InstanceGroupName", "-x"),
         "ValidationException",
         _verrs(_v("'-x'", f"{IG}.instanceGroupName", f"satisfy regular expression pattern: {NAME_PATTERN}"))),
    Case("create-group-name-too-long", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.0.InstanceGroupName", "g" * 64), "ValidationException",
         _verrs(_v(f"'{'g' * 64}'", f"{IG}.instanceGroupName", "have length less than or equal to 63"))),
    Case("create-role-pattern", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.0.ExecutionRole", "arn:aws:iam::1234:role/short"), "ValidationException",
         _verrs(_v("'arn:aws:iam::1234:role/short'", f"{IG}.executionRole",
                   f"satisfy regular expression pattern: {ROLE_PATTERN}"))),
    Case("create-role-too-short", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.ExecutionRole", "role"),
         "ValidationException",
         _verrs(_v("'role'", f"{IG}.executionRole", "have length greater than or equal to 20"),
                _v("'role'", f"{IG}.executionRole", f"satisfy regular expression pattern: {ROLE_PATTERN}"))),
    Case("create-threads-too-big", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.ThreadsPerCore", 3),
         "ValidationException", _verrs(_v("'3'", f"{IG}.threadsPerCore", "have value less than or equal to 2"))),
    Case("create-threads-zero", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.ThreadsPerCore", 0),
         "ValidationException", _verrs(_v("'0'", f"{IG}.threadsPerCore", "have value greater than or equal to 1"))),
    Case("create-node-type-enum", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.0.SlurmConfig.NodeType", "Head"), "ValidationException",
         _verrs(_v("'Head'", f"{IG}.slurmConfig.nodeType",
                   "satisfy enum value set: [Controller, Login, Compute]"))),
    Case("create-node-type-missing", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.SlurmConfig", {}),
         "ValidationException", _verrs(_v("null", f"{IG}.slurmConfig.nodeType", "not be null"))),
    Case("create-two-partitions", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.1.SlurmConfig.PartitionNames", ["a", "b"]), "ValidationException",
         _verrs(_v("'[a, b]'", f"{IG2}.slurmConfig.partitionNames", "have length less than or equal to 1"))),
    Case("create-partition-pattern", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.1.SlurmConfig.PartitionNames", ["bad part"]), "ValidationException",
         _verrs(_v("'bad part'", f"{IG2}.slurmConfig.partitionNames.1.member",
                   f"satisfy regular expression pattern: {NAME_PATTERN}"))),
    Case("create-lcc-oncreate-empty", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.0.LifeCycleConfig", {"SourceS3Uri": "s3://b/p", "OnCreate": ""}),
         "ValidationException",
         _verrs(_v("''", f"{IG}.lifeCycleConfig.onCreate", "have length greater than or equal to 1"),
                _v("''", f"{IG}.lifeCycleConfig.onCreate", "satisfy regular expression pattern: [\\S\\s]+"))),
    Case("create-lcc-oncreate-too-long", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.0.LifeCycleConfig", {"SourceS3Uri": "s3://b/p", "OnCreate": "x" * 129}),
         "ValidationException",
         f"1 validation error detected: Value '{'x' * 129}' at '{IG}.lifeCycleConfig.onCreate' {PREFIX} "
         "have length less than or equal to 128"),
    Case("create-lcc-uri-scheme", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.0.LifeCycleConfig", {"SourceS3Uri": "ftp://b/p", "OnCreate": "a.sh"}),
         "ValidationException",
         _verrs(_v("'ftp://b/p'", f"{IG}.lifeCycleConfig.sourceS3Uri",
                   f"satisfy regular expression pattern: {S3_PATTERN}"))),
    Case("create-lcc-uri-too-long", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.0.LifeCycleConfig", {"SourceS3Uri": "s3://b/" + "k" * 1020, "OnCreate": "a"}),
         "ValidationException",
         f"1 validation error detected: Value 's3://b/{'k' * 190}...' at '{IG}.lifeCycleConfig.sourceS3Uri' "
         f"{PREFIX} have length less than or equal to 1024"),
    Case("create-strategy-enum", SM + "CreateCluster",
         _create(CTL, CMP, Orchestrator={"Slurm": {"SlurmConfigStrategy": "Auto"}}), "ValidationException",
         _verrs(_v("'Auto'", "orchestrator.slurm.slurmConfigStrategy",
                   "satisfy enum value set: [Overwrite, Managed, Merge]"))),
    Case("create-provisioning-mode-enum", SM + "CreateCluster",
         _create(CTL, CMP, NodeProvisioningMode="Eager"), "ValidationException",
         _verrs(_v("'Eager'", "nodeProvisioningMode", "satisfy enum value set: [Continuous]"))),
    Case("create-node-recovery-enum", SM + "CreateCluster", _create(CTL, CMP, NodeRecovery="Manual"),
         "ValidationException",
         _verrs(_v("'Manual'", "nodeRecovery", "satisfy enum value set: [Automatic, None]"))),
    Case("create-min-count-negative", SM + "CreateCluster",
         _set(BASE, "InstanceGroups.1.MinInstanceCount", -2), "ValidationException",
         _verrs(_v("'-2'", f"{IG2}.minInstanceCount", "have value greater than or equal to 0"))),
    Case("create-vpc-missing-subnets", SM + "CreateCluster",
         _create(CTL, CMP, VpcConfig={"SecurityGroupIds": ["sg-1"]}), "ValidationException",
         _verrs(_v("null", "vpcConfig.subnets", "not be null"))),
    Case("create-vpc-subnet-pattern", SM + "CreateCluster",
         _create(CTL, CMP, VpcConfig={"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet_1"]}),
         "ValidationException",
         _verrs(_v("'subnet_1'", "vpcConfig.subnets.1.member", "satisfy regular expression pattern: [-0-9a-zA-Z]+"))),
    Case("create-tag-key-empty", SM + "CreateCluster", _create(CTL, CMP, Tags=[{"Key": "", "Value": "v"}]),
         "ValidationException",
         _verrs(_v("''", "tags.1.member.key", "have length greater than or equal to 1"))),
    Case("create-tags-too-many", SM + "CreateCluster",
         _create(CTL, CMP, Tags=[{"Key": f"k{i}", "Value": "v"} for i in range(51)]), "ValidationException",
         "1 validation error detected: Value '[{Key=k0, Value=v}, ", "prefix"),
    Case("create-unknown-member", SM + "CreateCluster", _create(CTL, CMP, Colour="blue"),
         "SerializationException", "Unknown member 'Colour'"),
    Case("create-unknown-nested-member", SM + "CreateCluster", _set(BASE, "InstanceGroups.0.Gpus", 8),
         "SerializationException", f"Unknown member 'Gpus' at '{IG}'"),
    Case("create-several-violations", SM + "CreateCluster",
         {"ClusterName": "bad_name", "InstanceGroups": [
             _group("controller-group", "Controller", -1, ThreadsPerCore=5, InstanceType="ml.nope")]},
         "ValidationException",
         _verrs(_v("'bad_name'", "clusterName", f"satisfy regular expression pattern: {NAME_PATTERN}"),
                _v("'-1'", f"{IG}.instanceCount", "have value greater than or equal to 0"),
                _v("'ml.nope'", f"{IG}.instanceType", f"satisfy enum value set: [{_enum('ClusterInstanceType')}]"),
                _v("'5'", f"{IG}.threadsPerCore", "have value less than or equal to 2"))),
    Case("create-type-and-unknown-together", SM + "CreateCluster",
         {"ClusterName": 1, "Extra": True, "InstanceGroups": [CTL]}, "SerializationException",
         "Unknown member 'Extra'; " + _v("'1'", "clusterName", "be of type string")),
    # ---- UpdateCluster
    Case("update-missing-name", SM + "UpdateCluster", {"InstanceGroups": [CTL]}, "ValidationException",
         _verrs(_v("null", "clusterName", "not be null"))),
    Case("update-name-pattern", SM + "UpdateCluster", {"ClusterName": "a b"}, "ValidationException",
         _verrs(_v("'a b'", "clusterName", f"satisfy regular expression pattern: {NAME_OR_ARN}"))),
    Case("update-groups-empty", SM + "UpdateCluster", {"ClusterName": EXISTING, "InstanceGroups": []},
         "ValidationException", _verrs(_v("'[]'", "instanceGroups", "have length greater than or equal to 1"))),
    Case("update-delete-name-pattern", SM + "UpdateCluster", _update(InstanceGroupsToDelete=["bad_group"]),
         "ValidationException",
         _verrs(_v("'bad_group'", "instanceGroupsToDelete.1.member",
                   f"satisfy regular expression pattern: {NAME_PATTERN}"))),
    Case("update-count-string", SM + "UpdateCluster", _update(_set(CMP, "InstanceCount", "3"), CTL),
         "SerializationException", _v("'3'", f"{IG}.instanceCount", "be of type integer")),
    Case("update-node-recovery-enum", SM + "UpdateCluster", _update(NodeRecovery="Sometimes"),
         "ValidationException",
         _verrs(_v("'Sometimes'", "nodeRecovery", "satisfy enum value set: [Automatic, None]"))),
    Case("update-unknown-member", SM + "UpdateCluster", _update(ClusterStatus="InService"),
         "SerializationException", "Unknown member 'ClusterStatus'"),
    # ---- DescribeCluster
    Case("describe-missing-name", SM + "DescribeCluster", {}, "ValidationException",
         _verrs(_v("null", "clusterName", "not be null"))),
    Case("describe-name-pattern", SM + "DescribeCluster", {"ClusterName": "bad_name"}, "ValidationException",
         _verrs(_v("'bad_name'", "clusterName", f"satisfy regular expression pattern: {NAME_OR_ARN}"))),
    Case("describe-name-too-long", SM + "DescribeCluster", {"ClusterName": "a" * 257}, "ValidationException",
         _verrs(_v(f"'{'a' * 197}...'", "clusterName", "have length less than or equal to 256"))),
    Case("describe-name-wrong-type", SM + "DescribeCluster", {"ClusterName": ["x"]}, "SerializationException",
         _v("'[x]'", "clusterName", "be of type string")),
    Case("describe-unknown-member", SM + "DescribeCluster", {"ClusterName": EXISTING, "Verbose": True},
         "SerializationException", "Unknown member 'Verbose'"),
    # ---- ListClusters
    Case("list-max-results-zero", SM + "ListClusters", {"MaxResults": 0}, "ValidationException",
         _verrs(_v("'0'", "maxResults", "have value greater than or equal to 1"))),
    Case("list-max-results-101", SM + "ListClusters", {"MaxResults": 101}, "ValidationException",
         _verrs(_v("'101'", "maxResults", "have value less than or equal to 100"))),
    Case("list-max-results-string", SM + "ListClusters", {"MaxResults": "10"}, "SerializationException",
         _v("'10'", "maxResults", "be of type integer")),
    Case("list-sort-by-enum", SM + "ListClusters", {"SortBy": "SIZE"}, "ValidationException",
         _verrs(_v("'SIZE'", "sortBy", "satisfy enum value set: [CREATION_TIME, NAME]"))),
    Case("list-sort-order-enum", SM + "ListClusters", {"SortOrder": "Up"}, "ValidationException",
         _verrs(_v("'Up'", "sortOrder", "satisfy enum value set: [Ascending, Descending]"))),
    Case("list-name-contains-pattern", SM + "ListClusters", {"NameContains": "a_b"}, "ValidationException",
         _verrs(_v("'a_b'", "nameContains", "satisfy regular expression pattern: [a-zA-Z0-9\\-]+"))),
    Case("list-creation-time-type", SM + "ListClusters", {"CreationTimeAfter": "yesterday"},
         "SerializationException", _v("'yesterday'", "creationTimeAfter", "be of type timestamp")),
    Case("list-several-violations", SM + "ListClusters",
         {"MaxResults": 101, "SortBy": "X", "SortOrder": "Y"}, "ValidationException",
         _verrs(_v("'101'", "maxResults", "have value less than or equal to 100"),
                _v("'X'", "sortBy", "satisfy enum value set: [CREATION_TIME, NAME]"),
                _v("'Y'", "sortOrder", "satisfy enum value set: [Ascending, Descending]"))),
    Case("list-token-garbage", SM + "ListClusters", {"NextToken": "%%%not-a-token"}, "ValidationException",
         "Invalid pagination token: NextToken is malformed."),
    Case("list-token-not-json", SM + "ListClusters",
         {"NextToken": base64.urlsafe_b64encode(b"\xff\xfe").decode()}, "ValidationException",
         "Invalid pagination token: NextToken is malformed."),
    Case("list-token-other-filters", SM + "ListClusters",
         {"NextToken": encode_token([1.0, "abc"], {"NameContains": "zzz"})}, "ValidationException",
         "Invalid pagination token: NextToken does not match the request parameters."),
    # ---- DeleteCluster
    Case("delete-missing-name", SM + "DeleteCluster", {}, "ValidationException",
         _verrs(_v("null", "clusterName", "not be null"))),
    Case("delete-name-pattern", SM + "DeleteCluster", {"ClusterName": "-bad-"}, "ValidationException",
         _verrs(_v("'-bad-'", "clusterName", f"satisfy regular expression pattern: {NAME_OR_ARN}"))),
    # ---- ListClusterNodes
    Case("nodes-missing-name", SM + "ListClusterNodes", {}, "ValidationException",
         _verrs(_v("null", "clusterName", "not be null"))),
    Case("nodes-max-results", SM + "ListClusterNodes", {"ClusterName": EXISTING, "MaxResults": 1000},
         "ValidationException", _verrs(_v("'1000'", "maxResults", "have value less than or equal to 100"))),
    Case("nodes-group-contains-empty", SM + "ListClusterNodes",
         {"ClusterName": EXISTING, "InstanceGroupNameContains": ""}, "ValidationException",
         _verrs(_v("''", "instanceGroupNameContains", "have length greater than or equal to 1"),
                _v("''", "instanceGroupNameContains", f"satisfy regular expression pattern: {NAME_PATTERN}"))),
    Case("nodes-sort-by-enum", SM + "ListClusterNodes", {"ClusterName": EXISTING, "SortBy": "ID"},
         "ValidationException", _verrs(_v("'ID'", "sortBy", "satisfy enum value set: [CREATION_TIME, NAME]"))),
    Case("nodes-logical-bool-type", SM + "ListClusterNodes",
         {"ClusterName": EXISTING, "IncludeNodeLogicalIds": "yes"}, "SerializationException",
         _v("'yes'", "includeNodeLogicalIds", "be of type boolean")),
    Case("nodes-token-garbage", SM + "ListClusterNodes", {"ClusterName": EXISTING, "NextToken": "@@"},
         "ValidationException", "Invalid pagination token: NextToken is malformed."),
    # ---- DescribeClusterNode
    Case("node-missing-name", SM + "DescribeClusterNode", {"NodeId": UNKNOWN_NODE}, "ValidationException",
         _verrs(_v("null", "clusterName", "not be null"))),
    Case("node-id-pattern", SM + "DescribeClusterNode", {"ClusterName": EXISTING, "NodeId": "i-XYZ"},
         "ValidationException",
         _verrs(_v("'i-XYZ'", "nodeId", f"satisfy regular expression pattern: {NODE_ID_PATTERN}"))),
    Case("node-id-empty", SM + "DescribeClusterNode", {"ClusterName": EXISTING, "NodeId": ""},
         "ValidationException",
         _verrs(_v("''", "nodeId", "have length greater than or equal to 1"),
                _v("''", "nodeId", f"satisfy regular expression pattern: {NODE_ID_PATTERN}"))),
    Case("node-neither-id", SM + "DescribeClusterNode", {"ClusterName": EXISTING}, "ValidationException",
         "You can specify either NodeLogicalId or InstanceId, but not both."),
    Case("node-both-ids", SM + "DescribeClusterNode",
         {"ClusterName": EXISTING, "NodeId": UNKNOWN_NODE, "NodeLogicalId": "abc"}, "ValidationException",
         "You can specify either NodeLogicalId or InstanceId, but not both."),
    # ---- BatchDeleteClusterNodes
    Case("batch-missing-name", SM + "BatchDeleteClusterNodes", {"NodeIds": [UNKNOWN_NODE]}, "ValidationException",
         _verrs(_v("null", "clusterName", "not be null"))),
    Case("batch-ids-empty", SM + "BatchDeleteClusterNodes", {"ClusterName": EXISTING, "NodeIds": []},
         "ValidationException", _verrs(_v("'[]'", "nodeIds", "have length greater than or equal to 1"))),
    Case("batch-no-ids", SM + "BatchDeleteClusterNodes", {"ClusterName": EXISTING}, "ValidationException",
         "Either NodeIds or NodeLogicalIds must be provided."),
    Case("batch-id-pattern", SM + "BatchDeleteClusterNodes", {"ClusterName": EXISTING, "NodeIds": ["node-1"]},
         "ValidationException",
         _verrs(_v("'node-1'", "nodeIds.1.member", f"satisfy regular expression pattern: {NODE_ID_PATTERN}"))),
    Case("batch-ids-not-list", SM + "BatchDeleteClusterNodes", {"ClusterName": EXISTING, "NodeIds": UNKNOWN_NODE},
         "SerializationException", _v(f"'{UNKNOWN_NODE}'", "nodeIds", "be of type list")),
    Case("batch-logical-too-many", SM + "BatchDeleteClusterNodes",
         {"ClusterName": EXISTING, "NodeLogicalIds": [f"n{i}x" for i in range(100)]}, "ValidationException",
         "1 validation error detected: Value '[n0x, n1x, ", "prefix"),
]

NEWER_OP_CASES: list[Case] = [
    Case("batch-add-not-continuous", SM + "BatchAddClusterNodes",
         {"ClusterName": EXISTING, "NodesToAdd": [{"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 1}]},
         "ValidationException",
         "BatchAddClusterNodes is only supported for cluster with NodeProvisioningMode set to Continuous"),
    Case("batch-add-no-nodes", SM + "BatchAddClusterNodes", {"ClusterName": EXISTING, "NodesToAdd": []},
         "ValidationException", "Member must have length greater than or equal to 1", match="contains"),
    Case("batch-add-zero", SM + "BatchAddClusterNodes",
         {"ClusterName": EXISTING, "NodesToAdd": [{"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 0}]},
         "ValidationException", "Member must have value greater than or equal to 1", match="contains"),
    Case("batch-add-too-many", SM + "BatchAddClusterNodes",
         {"ClusterName": EXISTING, "NodesToAdd": [{"InstanceGroupName": "compute-group", "IncrementTargetCountBy": 30},
                                                  {"InstanceGroupName": "controller-group",
                                                   "IncrementTargetCountBy": 30}]},
         "ValidationException", "NodesToAdd adds 60 nodes", match="contains"),
    Case("batch-add-unknown-cluster", SM + "BatchAddClusterNodes",
         {"ClusterName": "inv-nope", "NodesToAdd": [{"InstanceGroupName": "g", "IncrementTargetCountBy": 1}]},
         "ResourceNotFound", "Cluster inv-nope not found."),
    Case("list-ops-bad-status", SM + "ListClusterOperations", {"ClusterName": EXISTING, "Status": "Running"},
         "ValidationException", "Member must satisfy enum value set", match="contains"),
    Case("list-ops-bad-max", SM + "ListClusterOperations", {"ClusterName": EXISTING, "MaxResults": 101},
         "ValidationException", "Member must have value less than or equal to 100", match="contains"),
    Case("list-ops-bad-token", SM + "ListClusterOperations", {"ClusterName": EXISTING, "NextToken": "xyz"},
         "ValidationException", "Invalid pagination token: NextToken is malformed."),
    Case("describe-op-unknown", SM + "DescribeClusterOperation",
         {"ClusterName": EXISTING, "OperationId": "00000000-0000-4000-8000-000000000000"}, "ResourceNotFound",
         f"Operation 00000000-0000-4000-8000-000000000000 not found in cluster {EXISTING}."),
    Case("describe-op-missing-id", SM + "DescribeClusterOperation", {"ClusterName": EXISTING},
         "ValidationException", "Member must not be null", match="contains"),
    Case("move-nodes-eks-only", SM + "MoveClusterNodes",
         lambda arn: {"SourceClusterArn": arn, "SourceInstanceGroupName": "compute-group", "TargetClusterArn": arn,
                      "TargetInstanceGroupName": "controller-group", "InstanceCount": 1},
         "ValidationException", "MoveClusterNodes is only supported for clusters that use Amazon EKS as the "
         f"orchestrator; cluster {EXISTING} uses Slurm."),
    Case("move-nodes-two-selectors", SM + "MoveClusterNodes",
         lambda arn: {"SourceClusterArn": arn, "SourceInstanceGroupName": "compute-group", "TargetClusterArn": arn,
                      "TargetInstanceGroupName": "controller-group", "InstanceCount": 1,
                      "NodeIds": [UNKNOWN_NODE]},
         "ValidationException", "Specify exactly one of NodeIds, NodeLogicalIds, or InstanceCount."),
    Case("auto-patch-drain-first", SM + "CreateCluster",
         _create(CTL, _group("compute-group", "Compute", 1, ["compute"],
                             AutoPatchConfig={"PatchingStrategy": "DrainFirst"})),
         "ValidationException", _verrs("Instance group compute-group: AutoPatchConfig PatchingStrategy DrainFirst and "
                                       "DrainPolicy are available only for clusters that use Amazon EKS as the "
                                       "orchestrator.")),
    Case("auto-patch-when-idle", SM + "UpdateCluster",
         _update(CTL, _group("compute-group", "Compute", 2, ["compute"],
                             AutoPatchConfig={"PatchingStrategy": "WhenIdle"})),
         "ValidationException", "slurmpod does not implement AutoPatchConfig", match="contains"),
    Case("capacity-spot", SM + "CreateCluster",
         _create(CTL, _group("compute-group", "Compute", 1, ["compute"], CapacityRequirements={"Spot": {}})),
         "ValidationException", "CapacityRequirements.Spot is not available", match="contains"),
]

DOMAIN_CASES: list[Case] = [
    Case("rule-no-groups", SM + "CreateCluster", {"ClusterName": "inv-new"}, "ValidationException",
         _verrs("InstanceGroups must contain at least one instance group.")),
    Case("rule-two-controllers", SM + "CreateCluster",
         _create(CTL, _group("ctl2", "Controller"), CMP), "ValidationException",
         _verrs("2 Controller Groups found: SlurmConfig for InstanceGroups may only have one Controller Group.")),
    Case("rule-no-controller", SM + "CreateCluster", _create(CMP), "ValidationException",
         _verrs("Cluster inv-new has no InstanceGroup with Controller node type.")),
    Case("rule-two-logins", SM + "CreateCluster",
         _create(CTL, _group("login-a", "Login"), _group("login-b", "Login"), CMP), "ValidationException",
         _verrs("2 Login Groups found: SlurmConfig for InstanceGroups may have at most one Login Group.")),
    Case("rule-partition-on-controller", SM + "CreateCluster",
         _create(_group("controller-group", "Controller", 1, ["p"]), CMP), "ValidationException",
         _verrs("Partitions can only be assigned to Compute node types: "
                "instance group controller-group has NodeType Controller.")),
    Case("rule-partition-on-login", SM + "CreateCluster",
         _create(CTL, _group("login", "Login", 1, ["p"]), CMP), "ValidationException",
         _verrs("Partitions can only be assigned to Compute node types: instance group login has NodeType Login.")),
    Case("rule-compute-needs-partition", SM + "CreateCluster",
         _create(CTL, _group("compute-group", "Compute", 2)), "ValidationException",
         _verrs("PartitionNames is required for Compute instance group compute-group.")),
    Case("rule-compute-empty-partitions", SM + "CreateCluster",
         _create(CTL, _group("compute-group", "Compute", 2, [])), "ValidationException",
         _verrs("PartitionNames is required for Compute instance group compute-group.")),
    Case("rule-dev-reserved", SM + "CreateCluster", _create(CTL, _group("compute-group", "Compute", 2, ["dev"])),
         "ValidationException",
         _verrs("Partition name 'dev' in instance group compute-group is reserved for the universal partition "
                "that contains every compute node.")),
    Case("rule-slurm-config-all-or-none", SM + "CreateCluster", _create(CTL, _group("compute-group", None, 2)),
         "ValidationException",
         _verrs("SlurmConfig must be specified for all instance groups or for none: missing for compute-group.")),
    Case("rule-lcc-empty", SM + "CreateCluster", _create(_set(CTL, "LifeCycleConfig", {}), CMP),
         "ValidationException",
         _verrs("LifeCycleConfig for instance group controller-group must not be empty: specify SourceS3Uri and "
                "one of OnCreate or OnInitComplete.")),
    Case("rule-lcc-both-entry-points", SM + "CreateCluster",
         _create(_set(CTL, "LifeCycleConfig", {"SourceS3Uri": "s3://sagemaker-b/base/", "OnCreate": "a.sh",
                                               "OnInitComplete": "b.sh"}), CMP),
         "ValidationException",
         _verrs("LifeCycleConfig for instance group controller-group cannot specify both OnCreate and "
                "OnInitComplete.")),
    Case("rule-lcc-uri-without-entry", SM + "CreateCluster",
         _create(_set(CTL, "LifeCycleConfig", {"SourceS3Uri": "s3://sagemaker-b/base/"}), CMP),
         "ValidationException",
         _verrs("LifeCycleConfig for instance group controller-group must specify OnCreate or OnInitComplete "
                "together with SourceS3Uri.")),
    Case("rule-lcc-entry-without-uri", SM + "CreateCluster",
         _create(_set(CTL, "LifeCycleConfig", {"OnCreate": "on_create.sh"}), CMP), "ValidationException",
         _verrs("LifeCycleConfig for instance group controller-group must specify SourceS3Uri together with "
                "OnCreate.")),
    Case("rule-continuous-with-strategy", SM + "CreateCluster",
         _create(CTL, CMP, NodeProvisioningMode="Continuous",
                 Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}}),
         "ValidationException",
         _verrs("SlurmConfigStrategy is not supported when NodeProvisioningMode is set to Continuous.")),
    Case("rule-min-count-without-continuous", SM + "CreateCluster",
         _create(CTL, _set(CMP, "MinInstanceCount", 1)), "ValidationException",
         _verrs("MinInstanceCount for instance group compute-group is only available for clusters with "
                "NodeProvisioningMode set to Continuous.")),
    Case("rule-min-count-above-count", SM + "CreateCluster",
         _create(CTL, _set(CMP, "MinInstanceCount", 3), NodeProvisioningMode="Continuous"), "ValidationException",
         _verrs("MinInstanceCount must be between 0 and InstanceCount (inclusive): instance group compute-group "
                "has MinInstanceCount 3 and InstanceCount 2.")),
    Case("rule-continuous-legacy", SM + "CreateCluster",
         _create(_group("a", None), _group("b", None, 2), NodeProvisioningMode="Continuous"), "ValidationException",
         _verrs("NodeProvisioningMode Continuous requires SlurmConfig in every instance group; clusters using "
                "provisioning_parameters.json are not supported.")),
    Case("rule-no-instance-type", SM + "CreateCluster", _create(_set(CTL, "InstanceType", ...), CMP),
         "ValidationException", _verrs("InstanceType is required for instance group controller-group.")),
    Case("rule-duplicate-group-names", SM + "CreateCluster",
         _create(CTL, _group("controller-group", "Compute", 2, ["compute"])), "ValidationException",
         _verrs("Instance group names must be unique: controller-group is specified 2 times.")),
    Case("rule-controller-zero-nodes", SM + "CreateCluster", _create(_set(CTL, "InstanceCount", 0), CMP),
         "ValidationException",
         _verrs("Controller instance group controller-group must have an InstanceCount of at least 1.")),
    Case("rule-several-domain-findings", SM + "CreateCluster",
         _create(_group("controller-group", "Controller", 1, ["p"]), _group("compute-group", "Compute", 2, ["dev"]),
                 _group("login", None)),
         "ValidationException",
         _verrs("SlurmConfig must be specified for all instance groups or for none: missing for login.",
                "Partitions can only be assigned to Compute node types: instance group controller-group has "
                "NodeType Controller.",
                "Partition name 'dev' in instance group compute-group is reserved for the universal partition "
                "that contains every compute node.")),
    Case("rule-duplicate-cluster-name", SM + "CreateCluster", _create(CTL, CMP, name=EXISTING), "ResourceInUse",
         f"Cluster {EXISTING} already exists."),
    # ---- UpdateCluster rules against the InService seeded cluster
    Case("update-node-type-immutable", SM + "UpdateCluster",
         _update(_group("controller-group", "Login"), CMP, _group("new-ctl", "Controller")), "ValidationException",
         _verrs("NodeType of instance group controller-group cannot be changed from Controller to Login. To use a "
                "different node type, create a new instance group.")),
    Case("update-instance-type-immutable", SM + "UpdateCluster",
         _update(CTL, _set(CMP, "InstanceType", "ml.c5.xlarge")), "ValidationException",
         _verrs("InstanceType of instance group compute-group cannot be changed from ml.t3.medium to ml.c5.xlarge.")),
    Case("update-group-omitted", SM + "UpdateCluster", _update(CTL), "ValidationException",
         _verrs("Instance group compute-group must be specified in InstanceGroups or in InstanceGroupsToDelete.")),
    Case("update-delete-controller", SM + "UpdateCluster",
         _update(CMP, InstanceGroupsToDelete=["controller-group"]), "ValidationException",
         _verrs("Controller instance group controller-group cannot be deleted.",
                "Cluster inv-existing has no InstanceGroup with Controller node type.")),
    Case("update-delete-and-keep", SM + "UpdateCluster", _update(CTL, CMP, InstanceGroupsToDelete=["compute-group"]),
         "ValidationException",
         _verrs("Instance group compute-group cannot be both updated and deleted: it appears in InstanceGroups and "
                "in InstanceGroupsToDelete.")),
    Case("update-delete-unknown-group", SM + "UpdateCluster", _update(CTL, CMP, InstanceGroupsToDelete=["ghost"]),
         "ValidationException",
         _verrs("Instance group ghost in InstanceGroupsToDelete does not exist in cluster inv-existing.")),
    Case("update-delete-twice", SM + "UpdateCluster",
         _update(CTL, InstanceGroupsToDelete=["compute-group", "compute-group"]), "ValidationException",
         _verrs("Instance group compute-group is specified more than once in InstanceGroupsToDelete.")),
    Case("update-new-group-without-type", SM + "UpdateCluster",
         _update(CTL, CMP, _set(_group("extra-group", "Compute", 1, ["extra"]), "InstanceType", ...)),
         "ValidationException", _verrs("InstanceType is required for instance group extra-group.")),
    Case("update-second-controller", SM + "UpdateCluster", _update(CTL, CMP, _group("ctl-b", "Controller")),
         "ValidationException",
         _verrs("2 Controller Groups found: SlurmConfig for InstanceGroups may only have one Controller Group.")),
    Case("update-continuous-with-strategy", SM + "UpdateCluster",
         _update(CTL, CMP, NodeProvisioningMode="Continuous",
                 Orchestrator={"Slurm": {"SlurmConfigStrategy": "Merge"}}),
         "ValidationException",
         _verrs("SlurmConfigStrategy is not supported when NodeProvisioningMode is set to Continuous.")),
    Case("update-dev-partition", SM + "UpdateCluster", _update(CTL, CMP, _group("extra-group", "Compute", 1, ["dev"])),
         "ValidationException",
         _verrs("Partition name 'dev' in instance group extra-group is reserved for the universal partition "
                "that contains every compute node.")),
    Case("update-duplicate-groups", SM + "UpdateCluster", _update(CTL, CMP, CMP), "ValidationException",
         _verrs("Instance group names must be unique: compute-group is specified 2 times.")),
    # ---- ResourceNotFound
    Case("notfound-describe-name", SM + "DescribeCluster", {"ClusterName": "no-such-cluster"}, "ResourceNotFound",
         "Cluster no-such-cluster not found."),
    Case("notfound-describe-arn", SM + "DescribeCluster",
         {"ClusterName": "arn:aws:sagemaker:us-east-1:123456789012:cluster/zzzzzzzzzzzz"}, "ResourceNotFound",
         "Cluster arn:aws:sagemaker:us-east-1:123456789012:cluster/zzzzzzzzzzzz not found."),
    Case("notfound-arn-other-region", SM + "DescribeCluster",
         lambda arn: {"ClusterName": _other_arn(arn, region="eu-west-1")}, "ResourceNotFound",
         "Cluster arn:aws:sagemaker:eu-west-1:123456789012:cluster/", "prefix"),
    Case("notfound-arn-other-account", SM + "DescribeCluster",
         lambda arn: {"ClusterName": _other_arn(arn, account="210987654321")}, "ResourceNotFound",
         "Cluster arn:aws:sagemaker:us-east-1:210987654321:cluster/", "prefix"),
    Case("notfound-update-other-account", SM + "UpdateCluster",
         lambda arn: {"ClusterName": _other_arn(arn, account="210987654321"), "InstanceGroups": [CTL, CMP]},
         "ResourceNotFound", "Cluster arn:aws:sagemaker:us-east-1:210987654321:cluster/", "prefix"),
    Case("notfound-update", SM + "UpdateCluster", {"ClusterName": "ghost", "InstanceGroups": [CTL, CMP]},
         "ResourceNotFound", "Cluster ghost not found."),
    Case("notfound-delete", SM + "DeleteCluster", {"ClusterName": "ghost"}, "ResourceNotFound",
         "Cluster ghost not found."),
    Case("notfound-delete-other-region", SM + "DeleteCluster",
         lambda arn: {"ClusterName": _other_arn(arn, region="ap-northeast-1")}, "ResourceNotFound",
         "Cluster arn:aws:sagemaker:ap-northeast-1:123456789012:cluster/", "prefix"),
    Case("notfound-list-nodes", SM + "ListClusterNodes", {"ClusterName": "ghost"}, "ResourceNotFound",
         "Cluster ghost not found."),
    Case("notfound-describe-node-cluster", SM + "DescribeClusterNode", {"ClusterName": "ghost", "NodeId": UNKNOWN_NODE},
         "ResourceNotFound", "Cluster ghost not found."),
    Case("notfound-describe-node", SM + "DescribeClusterNode", {"ClusterName": EXISTING, "NodeId": UNKNOWN_NODE},
         "ResourceNotFound", f"Node {UNKNOWN_NODE} not found in cluster {EXISTING}."),
    Case("notfound-batch-delete", SM + "BatchDeleteClusterNodes", {"ClusterName": "ghost", "NodeIds": [UNKNOWN_NODE]},
         "ResourceNotFound", "Cluster ghost not found."),
]

PROTOCOL_CASES: list[Case] = [
    Case("malformed-json", SM + "ListClusters", '{"MaxResults": ', "SerializationException",
         "Request body is not valid JSON: ", "prefix"),
    Case("malformed-json-single-quotes", SM + "CreateCluster", "{'ClusterName': 'x'}", "SerializationException",
         "Request body is not valid JSON: ", "prefix"),
    Case("body-not-utf8", SM + "ListClusters", b"\x80\x81\x82", "SerializationException",
         "Request body is not valid JSON: ", "prefix"),
    Case("empty-body", SM + "ListClusters", b"", "SerializationException",
         "Request body is empty; expected a JSON object."),
    Case("whitespace-body", SM + "DescribeCluster", b"  \n ", "SerializationException",
         "Request body is empty; expected a JSON object."),
    Case("body-array", SM + "ListClusters", [], "SerializationException", "Request body must be a JSON object"),
    Case("body-string", SM + "DescribeCluster", '"inv-existing"', "SerializationException",
         "Request body must be a JSON object"),
    Case("body-null", SM + "ListClusters", "null", "SerializationException", "Request body must be a JSON object"),
    Case("deeply-nested", SM + "ListClusters", "[" * 50000 + "]" * 50000, "SerializationException",
         "Request body is nested too deeply."),
    Case("too-large", SM + "ListClusters", b" " * (1024 * 1024 + 1), "RequestEntityTooLargeException",
         "Request body of 1048577 bytes exceeds the limit of 1048576 bytes.", status=413),
    Case("wrong-content-type", SM + "ListClusters", {}, "SerializationException",
         "Unsupported Content-Type 'text/plain'; send application/x-amz-json-1.1.", content_type="text/plain"),
    Case("form-content-type", SM + "DescribeCluster", {"ClusterName": EXISTING}, "SerializationException",
         "Unsupported Content-Type 'application/x-www-form-urlencoded'; send application/x-amz-json-1.1.",
         content_type="application/x-www-form-urlencoded"),
    Case("unknown-sagemaker-op", SM + "Nope", {}, "UnknownOperationException", "Unknown operation SageMaker.Nope."),
    Case("unknown-service", "Foo.Bar", {}, "UnknownOperationException", "Unknown operation Foo.Bar."),
    Case("lowercase-service", "sagemaker.ListClusters", {}, "UnknownOperationException",
         "Unknown operation sagemaker.ListClusters."),
    Case("target-without-op", "SageMaker.", {}, "UnknownOperationException", "Unknown operation SageMaker.."),
    Case("missing-target", None, {}, "UnknownOperationException",
         "Missing X-Amz-Target header; expected SageMaker.<Operation>."),
    Case("unimplemented-op", SM + "ListModels", {}, "UnsupportedOperation",
         "slurmpod does not implement SageMaker.ListModels yet."),
    Case("unimplemented-op-invalid-body", SM + "CreateTrainingJob", {"Bogus": 1}, "UnsupportedOperation",
         "slurmpod does not implement SageMaker.CreateTrainingJob yet."),
]

ALL_CASES = MODEL_CASES + DOMAIN_CASES + PROTOCOL_CASES + NEWER_OP_CASES


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, str]]:
    """One server for the module, with the seeded cluster ``inv-existing`` InService."""
    state = Path(tmp_path_factory.mktemp("inv")) / "state"
    settings = Settings(state_dir=state, port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.01)
    with thread_server(settings) as server:
        client = server.client()
        arn = client.create_cluster(ClusterName=EXISTING, InstanceGroups=seed_groups())["ClusterArn"]
        wait_status(client, EXISTING, {"InService"})
        yield server, arn


def _snapshot(server: RunningServer) -> tuple[Any, Any]:
    listing = server.raw(SM + "ListClusters", {}).json()
    described = server.raw(SM + "DescribeCluster", {"ClusterName": EXISTING}).json()
    return listing, described


def _send(server: RunningServer, case: Case, arn: str) -> Any:
    body = case.body(arn) if callable(case.body) else case.body
    return server.raw(case.target or "", body, content_type=case.content_type, headers=case.headers)


def test_enough_cases() -> None:
    assert len(ALL_CASES) >= 60
    assert len({c.id for c in ALL_CASES}) == len(ALL_CASES)


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.id)
def test_invalid_input(srv: tuple[RunningServer, str], case: Case) -> None:
    server, arn = srv
    before = _snapshot(server)
    resp = _send(server, case, arn)
    assert resp.status_code == case.status, resp.text
    assert resp.headers["content-type"].startswith("application/x-amz-json-1.1")
    body = resp.json()
    assert set(body) == {"__type", "message"}, body
    assert body["__type"] == case.code, body
    if case.match == "exact":
        assert body["message"] == case.message
    elif case.match == "prefix":
        assert body["message"].startswith(case.message), body["message"]
    else:
        assert case.message in body["message"], body["message"]
    assert _snapshot(server) == before, "a rejected request changed the visible state"


def test_rejected_update_keeps_spec(srv: tuple[RunningServer, str]) -> None:
    """A rejected UpdateCluster (valid shape, broken rule) leaves the stored spec and status untouched."""
    server, _ = srv
    before = server.raw(SM + "DescribeCluster", {"ClusterName": EXISTING}).json()
    bad = _update(_set(CTL, "InstanceCount", 3), _set(CMP, "InstanceCount", 9),
                  _group("extra-group", "Compute", 1, ["dev"]))
    resp = server.raw(SM + "UpdateCluster", bad)
    assert resp.status_code == 400
    after = server.raw(SM + "DescribeCluster", {"ClusterName": EXISTING}).json()
    assert after == before
    assert after["ClusterStatus"] == "InService"
    assert [(g["InstanceGroupName"], g["TargetCount"]) for g in after["InstanceGroups"]] == [
        ("controller-group", 1), ("compute-group", 2)]


def test_rejected_creates_leave_no_cluster(srv: tuple[RunningServer, str]) -> None:
    server, _ = srv
    names = [c["ClusterName"] for c in server.raw(SM + "ListClusters", {}).json()["ClusterSummaries"]]
    assert names == [EXISTING]
    assert server.raw(SM + "DescribeCluster", {"ClusterName": "inv-new"}).json()["__type"] == "ResourceNotFound"


def test_crafted_token_with_bogus_key(srv: tuple[RunningServer, str]) -> None:
    """A NextToken with a valid filter hash but a key of the wrong types is a 400, not a 500."""
    server, _ = srv
    for key in (["x"], [{"a": 1}], [None, None], [[1], "a"]):
        resp = server.raw(SM + "ListClusters", {"NextToken": _token(key), "MaxResults": 1})
        assert resp.status_code == 400, (key, resp.text)
        assert resp.json() == {"__type": "ValidationException",
                               "message": "Invalid pagination token: NextToken is malformed."}


@pytest.mark.parametrize("target,extra", [("ListClusters", {}), ("ListClusterNodes", {"ClusterName": EXISTING})])
def test_iso_timestamp_filters_never_500(srv: tuple[RunningServer, str], target: str, extra: dict[str, Any]) -> None:
    """The model accepts ISO-8601 strings for timestamps; the server must not crash on them."""
    server, _ = srv
    for member in ("CreationTimeAfter", "CreationTimeBefore"):
        resp = server.raw(SM + target, {**extra, member: "2024-01-01T00:00:00Z"})
        assert resp.status_code < 500, resp.text
        if resp.status_code == 200:
            items = resp.json()["ClusterSummaries" if target == "ListClusters" else "ClusterNodeSummaries"]
            assert bool(items) == (member == "CreationTimeAfter")
        else:
            assert resp.json()["__type"] in ("ValidationException", "SerializationException")


def test_other_http_methods(srv: tuple[RunningServer, str]) -> None:
    import requests

    server, _ = srv
    resp = requests.get(server.endpoint + "/", timeout=10)
    assert resp.status_code == 404
    assert resp.json() == {"__type": "UnknownOperationException", "message": "Send POST / with X-Amz-Target."}


def test_update_while_creating_conflicts(tmp_path: Path) -> None:
    """UpdateCluster while the cluster is Creating -> ConflictException, and the pending spec is unchanged."""
    settings = Settings(state_dir=tmp_path / "state", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=1.0)
    with thread_server(settings) as server:
        client = server.client()
        client.create_cluster(ClusterName="slow", InstanceGroups=seed_groups(4))
        assert client.describe_cluster(ClusterName="slow")["ClusterStatus"] == "Creating"
        body = {"ClusterName": "slow", "InstanceGroups": [CTL, _set(CMP, "InstanceCount", 6)]}
        resp = server.raw(SM + "UpdateCluster", body)
        assert resp.status_code == 400
        assert resp.json() == {
            "__type": "ConflictException",
            "message": "Cluster slow is in Creating status and cannot be updated. Wait until it is InService.",
        }
        d = client.describe_cluster(ClusterName="slow")
        assert d["ClusterStatus"] == "Creating"
        assert [g["TargetCount"] for g in d["InstanceGroups"]] == [1, 4]


def test_update_with_bad_json_types_in_groups(srv: tuple[RunningServer, str]) -> None:
    """boto3 with its own validation off: a wrong-typed member is refused by the server itself."""
    server, _ = srv
    client = server.client(validate=False)
    with pytest.raises(client.exceptions.ClientError) as info:
        client.update_cluster(ClusterName=EXISTING, InstanceGroups=[{**CTL, "InstanceCount": "one"}, CMP])
    err = info.value.response
    assert err["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert err["Error"]["Code"] == "SerializationException"
    assert err["Error"]["Message"] == _v("'one'", f"{IG}.instanceCount", "be of type integer")


def test_delete_group_without_listing_groups(srv: tuple[RunningServer, str]) -> None:
    """Deleting the controller with InstanceGroups omitted names only the controller rule."""
    server, _ = srv
    resp = server.raw(SM + "UpdateCluster", {"ClusterName": EXISTING, "InstanceGroupsToDelete": ["controller-group"]})
    assert resp.status_code == 400
    body = resp.json()
    assert body["__type"] == "ValidationException"
    assert "Controller instance group controller-group cannot be deleted." in body["message"]
    assert "cannot be both updated and deleted" not in body["message"]


def test_json_dump_roundtrip_of_cases() -> None:
    """Every static case body is encodable (guards the table itself)."""
    for case in ALL_CASES:
        if not callable(case.body) and not isinstance(case.body, str | bytes):
            json.dumps(case.body)
