"""Lifecycle log streams kept by the control plane (HyperPod's CloudWatch stream names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmpod.domain.model import ClusterRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, SlurmConfig
from slurmpod.domain.status import ClusterStatus, NodeType
from slurmpod.lifecycle.logstreams import LogStreams, lifecycle_stream
from slurmpod.reconciler.slurm_runtime.phases import provisioning_parameters_json


def test_streams_round_trip_and_outlive_the_cluster_record(tmp_path: Path) -> None:
    logs = LogStreams(tmp_path)
    stream = lifecycle_stream("compute-group", "i-0123456789abcdef0")
    assert stream == "LifecycleConfig/compute-group/i-0123456789abcdef0"
    logs.write("abc123def456", stream, "[SageMaker] hello\n", cluster_name="demo")
    logs.write("abc123def456", stream, "[SageMaker] hello\nagain\n", cluster_name="demo")
    (s,) = logs.streams("abc123def456")
    assert s.name == stream and logs.read("abc123def456", stream).endswith("again\n")
    assert logs.find("demo") == ["abc123def456"] and logs.find("abc123def456") == ["abc123def456"]
    with pytest.raises(ValueError):
        logs.write("abc123def456", "../../etc/passwd", "x")


def test_provisioning_parameters_follow_slurm_config() -> None:
    spec = ClusterSpec(name="c", instance_groups=(
        InstanceGroupSpec(name="ctl", instance_count=1, slurm_config=SlurmConfig(NodeType.CONTROLLER)),
        InstanceGroupSpec(name="login", instance_count=1, slurm_config=SlurmConfig(NodeType.LOGIN)),
        InstanceGroupSpec(name="gpu", instance_count=2, slurm_config=SlurmConfig(NodeType.COMPUTE, ("p5", "big"))),
        InstanceGroupSpec(name="cpu", instance_count=2, slurm_config=SlurmConfig(NodeType.COMPUTE)),
    ))
    cluster = ClusterRecord(cluster_id="abc123def456", account_id="1", region="us-east-1", name="c", arn="arn",
                            spec=spec, status=ClusterStatus.CREATING, creation_time=0.0)
    doc = json.loads(provisioning_parameters_json(cluster))
    assert doc["controller_group"] == "ctl" and doc["login_group"] == "login"
    assert doc["worker_groups"] == [{"instance_group_name": "gpu", "partition_name": "p5"},
                                    {"instance_group_name": "gpu", "partition_name": "big"},
                                    {"instance_group_name": "cpu", "partition_name": "cpu"}]
