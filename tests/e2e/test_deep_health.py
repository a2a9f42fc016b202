"""Deep health checks through boto3 on the simulated provider: validation of both fields, the on-start and
on-demand flows, one on-demand request per cluster, a failed node replaced and re-checked (real Slurm:
tests/integration/test_deep_health_local.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from slurmpod.settings import Settings
from tests.serverproc import free_port, seed_groups, thread_server, wait_status

CHECKS = ["InstanceStress", "InstanceConnectivity"]


@pytest.fixture
def srv(tmp_path: Path) -> Any:
    settings = Settings(state_dir=tmp_path / "s", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.02)
    with thread_server(settings) as s:
        yield s


def _groups(checks: list[str] | None = CHECKS, itype: str = "ml.t3.medium", count: int = 2) -> list[dict[str, Any]]:
    groups = seed_groups(count, itype=itype)
    if checks is not None:
        groups[1]["OnStartDeepHealthChecks"] = checks
    return groups


def _error(c: Any, fn: Any, **kw: Any) -> tuple[str, str]:
    with pytest.raises(c.exceptions.ClientError) as err:
        fn(**kw)
    return err.value.response["Error"]["Code"], err.value.response["Error"]["Message"]


def _nodes(c: Any, name: str) -> list[dict[str, Any]]:
    return c.list_cluster_nodes(ClusterName=name)["ClusterNodeSummaries"]


def _events(c: Any, name: str) -> list[str]:
    return [e["Description"] for e in c.list_cluster_events(ClusterName=name, MaxResults=100)["Events"]]


def _until(pred: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_on_start_field_is_validated_and_echoed(srv: Any) -> None:
    c = srv.client()
    code, msg = _error(c, c.create_cluster, ClusterName="v", InstanceGroups=_groups(["InstanceStress"] * 2))
    assert code == "ValidationException" and "duplicate deep health checks: InstanceStress" in msg
    code, msg = _error(c, c.create_cluster, ClusterName="v", InstanceGroups=_groups(["MultiNodeTrainingValidation"]))
    assert code == "ValidationException" and "MultiNodeTrainingValidation is not supported" in msg
    bad = _groups(None)
    bad[0]["OnStartDeepHealthChecks"] = ["InstanceStress"]
    code, msg = _error(c, c.create_cluster, ClusterName="v", InstanceGroups=bad)
    assert code == "ValidationException" and "run on Compute instance groups only" in msg
    code, msg = _error(c, c.create_cluster, ClusterName="v", InstanceGroups=_groups(["Nope"]))  # the model's enum
    assert code == "ValidationException" and "enum value set" in msg
    assert c.list_clusters()["ClusterSummaries"] == []  # nothing half-applied
    c.create_cluster(ClusterName="v", InstanceGroups=_groups())
    d = c.describe_cluster(ClusterName="v")
    assert d["InstanceGroups"][1]["OnStartDeepHealthChecks"] == CHECKS


def test_on_start_and_on_demand(srv: Any) -> None:
    c = srv.client()
    rt = srv.server.runtime
    c.create_cluster(ClusterName="d", InstanceGroups=_groups())
    assert wait_status(c, "d", {"InService", "Failed"})["ClusterStatus"] == "InService"
    workers = [n for n in _nodes(c, "d") if n["InstanceGroupName"] == "compute-group"]
    assert all(n["InstanceStatus"]["Status"] == "Running" for n in workers)
    events = _events(c, "d")
    for n in workers:
        assert any(f"Deep health checks passed on Instance {n['InstanceId']}" in e for e in events)
    ctl = next(n for n in _nodes(c, "d") if n["InstanceGroupName"] == "controller-group")
    assert not any(ctl["InstanceId"] in e and "Deep health" in e for e in events)  # workers only

    # on-demand validation: unknown group, controller group, unknown instance, unsupported check
    cfg = [{"InstanceGroupName": "nope", "DeepHealthChecks": ["InstanceStress"]}]
    assert _error(c, c.start_cluster_health_check, ClusterName="d", DeepHealthCheckConfigurations=cfg)[0] == \
        "ValidationException"
    cfg = [{"InstanceGroupName": "controller-group", "DeepHealthChecks": ["InstanceStress"]}]
    assert "Compute instance groups only" in _error(c, c.start_cluster_health_check, ClusterName="d",
                                                    DeepHealthCheckConfigurations=cfg)[1]
    cfg = [{"InstanceGroupName": "compute-group", "DeepHealthChecks": ["InstanceStress"],
            "InstanceIds": ["i-0123456789abcdef0"]}]
    assert "not found in instance group" in _error(c, c.start_cluster_health_check, ClusterName="d",
                                                   DeepHealthCheckConfigurations=cfg)[1]
    cfg = [{"InstanceGroupName": "compute-group", "DeepHealthChecks": ["MultiNodeTrainingValidation"]}]
    assert _error(c, c.start_cluster_health_check, ClusterName="d", DeepHealthCheckConfigurations=cfg)[0] == \
        "ValidationException"
    assert _error(c, c.start_cluster_health_check, ClusterName="missing", DeepHealthCheckConfigurations=cfg)[0] == \
        "ResourceNotFound"

    # one node busy (its jobs keep it): the request stays active, a second one is refused
    busy, other = workers[0]["InstanceId"], workers[1]["InstanceId"]
    rt.jobs[busy] = ["7"]
    rt.dhc_fail.add(other)
    cfg = [{"InstanceGroupName": "compute-group", "DeepHealthChecks": ["InstanceStress"]}]
    assert c.start_cluster_health_check(ClusterName="d", DeepHealthCheckConfigurations=cfg)["ClusterArn"]
    code, msg = _error(c, c.start_cluster_health_check, ClusterName="d", DeepHealthCheckConfigurations=cfg)
    assert code == "ConflictException" and "Only one on-demand deep health check request" in msg
    # the failing node is replaced; its group has OnStartDeepHealthChecks, so the successor is checked on start
    _until(lambda: other not in {n["InstanceId"] for n in _nodes(c, "d")})
    _until(lambda: len([n for n in _nodes(c, "d") if n["InstanceStatus"]["Status"] == "Running"]) == 3)
    events = _events(c, "d")
    assert any(f"Deep health checks failed on Instance {other}" in e for e in events)
    successor = next(n["InstanceId"] for n in _nodes(c, "d")
                     if n["InstanceGroupName"] == "compute-group" and n["InstanceId"] not in (busy, other))
    assert any(f"Deep health checks passed on Instance {successor}" in e for e in events)
    rt.jobs.pop(busy)
    _until(lambda: sum(f"passed on Instance {busy}" in e for e in _events(c, "d")) >= 2)  # on start, on demand
    # the request is over: a new one is accepted
    assert c.start_cluster_health_check(ClusterName="d", DeepHealthCheckConfigurations=cfg)["ClusterArn"]


def test_busy_node_is_skipped(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "s", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.02, dhc_busy_timeout=0.5)
    with thread_server(settings) as s:
        c = s.client()
        c.create_cluster(ClusterName="b", InstanceGroups=_groups(None, count=1))
        wait_status(c, "b", {"InService"})
        node = next(n["InstanceId"] for n in _nodes(c, "b") if n["InstanceGroupName"] == "compute-group")
        s.server.runtime.jobs[node] = ["12"]
        c.start_cluster_health_check(ClusterName="b", DeepHealthCheckConfigurations=[
            {"InstanceGroupName": "compute-group", "DeepHealthChecks": ["InstanceStress"]}])
        _until(lambda: any(f"Deep health checks skipped on Instance {node}" in e for e in _events(c, "b")))
        assert all(n["InstanceStatus"]["Status"] == "Running" for n in _nodes(c, "b"))
