"""plan_software_update (pure), table-style: batches, order, waits, rollback, completion."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurmpod.domain.model import ClusterRecord, NodeRecord, SoftwareUpdate
from slurmpod.domain.software import new_software_update
from slurmpod.domain.spec import (
    CapacitySize,
    CapacitySizeType,
    ClusterSpec,
    DeploymentSpec,
    InstanceGroupSpec,
    SlurmConfig,
)
from slurmpod.domain.status import ClusterStatus, InstanceStatus, NodeType, SoftwareUpdateStatus, UpdatePhase
from slurmpod.reconciler import rolling

SPEC = ClusterSpec(name="r", instance_groups=(
    InstanceGroupSpec(name="ctl", instance_count=1, slurm_config=SlurmConfig(NodeType.CONTROLLER)),
    InstanceGroupSpec(name="work", instance_count=4, slurm_config=SlurmConfig(NodeType.COMPUTE, ("work",))),
))
OLD, NEW = "ami-old", "ami-new"


def _update(batch: int = 2, wait: int = 0, **kw: object) -> SoftwareUpdate:
    dep = DeploymentSpec(batch=CapacitySize(CapacitySizeType.INSTANCE_COUNT, batch), wait_seconds=wait)
    return replace(new_software_update("op-1", NEW, ["ctl", "work"], dep, 0.0), **kw)  # type: ignore[arg-type]


def _cluster(su: SoftwareUpdate) -> ClusterRecord:
    return ClusterRecord(cluster_id="c", account_id="1", region="us-east-1", name="r", arn="arn", spec=SPEC,
                         status=ClusterStatus.SYSTEM_UPDATING, creation_time=0.0, software_update=su)


def _nodes(images: dict[int, str] | None = None, **data_of: dict[str, object]) -> list[NodeRecord]:
    out = [NodeRecord(instance_id="i-0", cluster_id="c", group="ctl", seq=0, status=InstanceStatus.RUNNING,
                      launch_time=0.0, image_id=(images or {}).get(0, OLD))]
    for k in range(1, 5):
        out.append(NodeRecord(instance_id=f"i-{k}", cluster_id="c", group="work", seq=k,
                              status=InstanceStatus.RUNNING, launch_time=0.0, image_id=(images or {}).get(k, OLD),
                              data=data_of.get(f"i{k}", {})))
    return out


def _plan(su: SoftwareUpdate, nodes: list[NodeRecord], now: float = 100.0,
          busy: frozenset[str] = frozenset()) -> list[rolling.RollingAction]:
    return rolling.plan_software_update(_cluster(su), nodes, busy, now)


def test_first_batch_is_compute_in_launch_order_of_batch_size() -> None:
    (action,) = _plan(_update(batch=2), _nodes())
    assert isinstance(action, rolling.StartNodeUpdates)
    assert action.instance_ids == ("i-1", "i-2") and action.image == NEW and action.update.batches == 1


def test_controllers_go_last_and_one_at_a_time() -> None:
    (action,) = _plan(_update(batch=4, batches=1), _nodes({1: NEW, 2: NEW, 3: NEW, 4: NEW}))
    assert isinstance(action, rolling.StartNodeUpdates) and action.instance_ids == ("i-0",)


def test_a_slurm_major_upgrade_updates_the_controllers_first() -> None:
    """SchedMD's order (slurmdbd, slurmctld, then slurmd): the accounting host follows the first controller's boot;
    the compute nodes go once every controller runs the new release."""
    (action,) = _plan(_update(batch=2, slurm_upgrade=True), _nodes())
    assert isinstance(action, rolling.StartNodeUpdates) and action.instance_ids == ("i-0",)
    (action,) = _plan(_update(batch=2, slurm_upgrade=True, batches=1), _nodes({0: NEW}))
    assert isinstance(action, rolling.StartNodeUpdates) and action.instance_ids == ("i-1", "i-2")
    su = _update(slurm_upgrade=True)
    assert SoftwareUpdate.from_dict(su.to_dict()) == su  # survives the store
    assert SoftwareUpdate.from_dict({k: v for k, v in su.to_dict().items() if k != "slurm_upgrade"}).slurm_upgrade \
        is False  # rows written before the field existed


def test_waits_between_batches() -> None:
    su = _update(batch=2, wait=60, batches=1, last_batch_end=90.0)
    assert _plan(su, _nodes({1: NEW, 2: NEW}), now=100.0) == []
    (action,) = _plan(su, _nodes({1: NEW, 2: NEW}), now=151.0)
    assert isinstance(action, rolling.StartNodeUpdates) and action.instance_ids == ("i-3", "i-4")


def test_nodes_in_flight_are_resumed_unless_busy() -> None:
    nodes = _nodes(i1={"update_to": NEW}, i2={"update_to": NEW})
    actions = _plan(_update(), nodes, busy=frozenset({"i-2"}))
    assert actions == [rolling.ResumeNodeUpdate("i-1")]


def test_a_failure_switches_to_rollback_then_restores_previous_images() -> None:
    su = _update(batch=1, batches=1, failed={"i-1": "boom"})
    (switch,) = _plan(su, _nodes())
    assert isinstance(switch, rolling.SetSoftwareUpdate) and switch.update.phase == UpdatePhase.ROLLBACK
    rb = replace(switch.update, done={"i-2": OLD})
    nodes = _nodes({2: NEW}, i1={"update_from": OLD})
    nodes[1] = replace(nodes[1], status=InstanceStatus.FAILURE)
    (back,) = _plan(rb, nodes)
    assert isinstance(back, rolling.StartNodeUpdates) and back.image == OLD and back.instance_ids == ("i-1",)


@pytest.mark.parametrize(("broken", "status"), [(False, SoftwareUpdateStatus.ROLLBACK_COMPLETE),
                                                 (True, SoftwareUpdateStatus.FAILED)])
def test_rollback_finishes(broken: bool, status: SoftwareUpdateStatus) -> None:
    su = _update(phase=UpdatePhase.ROLLBACK, failed={"i-1": "boom"}, done={})
    nodes = _nodes(i1={"rollback_failed": "again"} if broken else {})
    (finish,) = _plan(su, nodes)
    assert isinstance(finish, rolling.FinishSoftwareUpdate) and finish.status == status
    assert finish.failure_message and "boom" in finish.failure_message


def test_everything_updated_succeeds() -> None:
    (finish,) = _plan(_update(batches=3), _nodes({0: NEW, 1: NEW, 2: NEW, 3: NEW, 4: NEW}))
    assert isinstance(finish, rolling.FinishSoftwareUpdate) and finish.status == SoftwareUpdateStatus.SUCCEEDED


def test_only_system_updating_clusters_plan() -> None:
    c = replace(_cluster(_update()), status=ClusterStatus.IN_SERVICE)
    assert rolling.plan_software_update(c, _nodes(), frozenset(), 0.0) == []
