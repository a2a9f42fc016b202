"""resource_config.json and provisioning_parameters.json rendering."""

from __future__ import annotations

import json

from slurmpod.lifecycle.resource_config import (
    ResourceGroup,
    ResourceInstance,
    render_provisioning_parameters,
    render_resource_config,
)

GROUPS = (
    ResourceGroup("controller-machine", "ml.c5.xlarge", (ResourceInstance("i-0aaa", "10.231.0.2"),)),
    ResourceGroup(
        "compute-nodes",
        "ml.p4d.24xlarge",
        (
            ResourceInstance("i-0bbb", "10.231.0.3"),
            ResourceInstance("i-0ccc", "10.231.0.4", instance_name="custom-name"),
        ),
    ),
)


def test_resource_config_shape() -> None:
    text = render_resource_config(
        GROUPS, cluster_name="demo", cluster_arn="arn:aws:sagemaker:us-east-1:123456789012:cluster/abc"
    )
    assert text.endswith("\n")
    assert json.loads(text) == {
        "ClusterConfig": {
            "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc",
            "ClusterName": "demo",
        },
        "InstanceGroups": [
            {
                "Name": "controller-machine",
                "InstanceType": "ml.c5.xlarge",
                "Instances": [
                    {
                        "InstanceName": "controller-machine-1",
                        "AgentIpAddress": "10.231.0.2",
                        "CustomerIpAddress": "10.231.0.2",
                        "InstanceId": "i-0aaa",
                    }
                ],
            },
            {
                "Name": "compute-nodes",
                "InstanceType": "ml.p4d.24xlarge",
                "Instances": [
                    {
                        "InstanceName": "compute-nodes-1",
                        "AgentIpAddress": "10.231.0.3",
                        "CustomerIpAddress": "10.231.0.3",
                        "InstanceId": "i-0bbb",
                    },
                    {
                        "InstanceName": "custom-name",
                        "AgentIpAddress": "10.231.0.4",
                        "CustomerIpAddress": "10.231.0.4",
                        "InstanceId": "i-0ccc",
                    },
                ],
            },
        ],
    }


def test_resource_config_without_cluster_and_deterministic() -> None:
    text = render_resource_config(GROUPS)
    assert "ClusterConfig" not in json.loads(text)
    assert render_resource_config(GROUPS) == text
    assert json.loads(render_resource_config([])) == {"InstanceGroups": []}


def test_sample_script_lookup_by_ip() -> None:
    """AWS's sample lifecycle scripts find their own group by matching CustomerIpAddress."""
    doc = json.loads(render_resource_config(GROUPS))
    mine = [
        g["Name"]
        for g in doc["InstanceGroups"]
        for inst in g["Instances"]
        if inst["CustomerIpAddress"] == "10.231.0.4"
    ]
    assert mine == ["compute-nodes"]


def test_provisioning_parameters() -> None:
    text = render_provisioning_parameters(
        "controller-machine",
        "login-group",
        [("compute-nodes", "dev"), ("gpu-nodes", "gpu")],
        fsx_dns_name="fs-1.fsx.us-east-1.amazonaws.com",
        fsx_mountname="abcd",
        extra={"slurm_configurations": {"slurm_shared_directory": "/fsx"}, "version": "ignored"},
    )
    assert json.loads(text) == {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": "controller-machine",
        "login_group": "login-group",
        "worker_groups": [
            {"instance_group_name": "compute-nodes", "partition_name": "dev"},
            {"instance_group_name": "gpu-nodes", "partition_name": "gpu"},
        ],
        "fsx_dns_name": "fs-1.fsx.us-east-1.amazonaws.com",
        "fsx_mountname": "abcd",
        "slurm_configurations": {"slurm_shared_directory": "/fsx"},
    }


def test_provisioning_parameters_minimal() -> None:
    doc = json.loads(render_provisioning_parameters("ctl", None, []))
    assert doc == {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": "ctl",
        "worker_groups": [],
    }
