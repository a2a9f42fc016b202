"""domain.deep_health: the rules of both fields, request records, merging, and what the planner picks."""

from __future__ import annotations

from slurmpod.domain import deep_health as dh
from slurmpod.domain.model import NodeRecord
from slurmpod.domain.spec import DeepHealthCheck, InstanceGroupSpec, SlurmConfig
from slurmpod.domain.status import InstanceStatus, NodeType

S, C, M = (DeepHealthCheck.INSTANCE_STRESS, DeepHealthCheck.INSTANCE_CONNECTIVITY,
           DeepHealthCheck.MULTI_NODE_TRAINING_VALIDATION)


def _group(checks: tuple[DeepHealthCheck, ...], node_type: NodeType = NodeType.COMPUTE) -> InstanceGroupSpec:
    return InstanceGroupSpec("g", 1, "ml.c5.xlarge", slurm_config=SlurmConfig(node_type, ("p",)),
                             deep_health_checks=checks)


def _node(iid: str, status: InstanceStatus, req: dh.DhcRequest | None, group: str = "g") -> NodeRecord:
    return NodeRecord(iid, "c", group, 1, status, 0.0, data=dh.with_request({}, req))


def test_group_findings() -> None:
    assert dh.group_findings(_group((S, C)), accelerated=False, strict=False) == []
    assert "duplicate deep health checks: InstanceStress" in dh.group_findings(_group((S, S)), accelerated=True,
                                                                                 strict=False)[0]
    assert "MultiNodeTrainingValidation is not supported" in dh.group_findings(_group((M,)), accelerated=True,
                                                                               strict=False)[0]
    assert "Compute instance groups only" in dh.group_findings(_group((S,), NodeType.LOGIN), accelerated=True,
                                                               strict=False)[0]
    assert "GPU and Trainium" in dh.group_findings(_group((S,)), accelerated=False, strict=True)[0]
    assert dh.group_findings(_group((S,)), accelerated=True, strict=True) == []


def test_requests_round_trip_and_on_start() -> None:
    req = dh.DhcRequest((S, C), True, 12.5, "op-1", started=True)
    assert dh.DhcRequest.from_dict(req.to_dict()) == req
    assert dh.on_start_request(_group(()), 1.0) is None
    assert dh.on_start_request(_group((S,), NodeType.CONTROLLER), 1.0) is None
    assert dh.on_start_request(_group((S, C)), 3.0) == dh.DhcRequest((S, C), False, 3.0)
    assert dh.with_request({"x": 1, "dhc": {}}, None) == {"x": 1}


def test_due_and_active_on_demand() -> None:
    nodes = [_node("a", InstanceStatus.RUNNING, dh.DhcRequest((S,), True, 0.0)),
             _node("b", InstanceStatus.DEEP_HEALTH_CHECK_IN_PROGRESS, dh.DhcRequest((S,), False, 0.0)),
             _node("c", InstanceStatus.RUNNING, None),
             _node("d", InstanceStatus.SHUTTING_DOWN, dh.DhcRequest((S,), True, 0.0))]
    assert {g: [n.instance_id for n in ns] for g, ns in dh.due(nodes).items()} == {"g": ["a", "b"]}
    assert [n.instance_id for n in dh.active_on_demand(nodes)] == ["a"]


def test_merge_targets() -> None:
    t = dh.merge_targets([dh.HealthCheckTarget("g", (S,), ("i-1",)), dh.HealthCheckTarget("g", (C,), ("i-2",)),
                          dh.HealthCheckTarget("h", (S,))])
    assert t == [dh.HealthCheckTarget("g", (S, C), ("i-1", "i-2")), dh.HealthCheckTarget("h", (S,))]
    whole = dh.merge_targets([dh.HealthCheckTarget("g", (S,), ("i-1",)), dh.HealthCheckTarget("g", (S,))])
    assert whole == [dh.HealthCheckTarget("g", (S,), None)]
