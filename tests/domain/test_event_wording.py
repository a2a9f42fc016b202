"""domain/events.py keeps HyperPod's (and slurmpod's) event wordings: each helper's exact text and level."""

from __future__ import annotations

import pytest

from slurmpod.domain import events as ev
from slurmpod.domain.model import EventDetails
from slurmpod.domain.status import EventLevel, UpdatePhase

CASES = [
    (ev.instance_creation_started("c", "g"), "Instance creation started successfully in Cluster c and IG g",
     EventLevel.INFO),
    (ev.node_op_failed("c", "g", "i-1", "reboot", "x"), "Instance reboot i-1 in Cluster c and IG g failed",
     EventLevel.ERROR),
    (ev.instance_unhealthy("g", "i-1", automatic=True),
     "Instance i-1 in IG g is unhealthy (its processes are gone); NodeRecovery Automatic is rebooting it",
     EventLevel.WARN),
    (ev.instance_unhealthy("g", "i-1", automatic=False),
     "Instance i-1 in IG g is unhealthy; NodeRecovery is None, so it is left to the operator", EventLevel.ERROR),
    (ev.slurm_requested("g", "i-1", "Replace"),
     "Slurm asked to replace instance i-1 in IG g (Action:Replace); its jobs have ended", EventLevel.INFO),
    (ev.software_update_scheduled("c", "g"),
     "InstanceGroup g in Cluster c has been scheduled for UpdateClusterSoftware to latest.", EventLevel.INFO),
    (ev.root_volume_replacement_started("g", "i-1"), "Root volume replacement started for Instance i-1 in IG g.",
     EventLevel.INFO),
    (ev.instance_software_updated("g", "i-1", UpdatePhase.UPDATE), "Instance i-1 in IG g updated successfully.",
     EventLevel.INFO),
    (ev.instance_software_updated("g", "i-1", UpdatePhase.ROLLBACK),
     "Instance i-1 in IG g rolled back successfully to previous AMI.", EventLevel.INFO),
    (ev.instance_software_update_failed("g", "i-1", UpdatePhase.UPDATE, "x"),
     "Instance i-1 in IG g failed to update. Rollback initiated.", EventLevel.ERROR),
    (ev.instance_software_update_failed("g", "i-1", UpdatePhase.ROLLBACK, "x"),
     "UpdateClusterSoftware rollback failed for instance i-1 in IG g.", EventLevel.ERROR),
    (ev.instance_launch_retry("c", "g", "i-1", 4.7, "x"),
     "Instance launch in Cluster c and IG g will be retried in 4 s", EventLevel.WARN),
    (ev.lifecycle_script_completed("g", "i-1", "on_create.sh", "abc"),
     "Instance lifecycle script execution for EC2 Instance i-1 has Completed (on_create.sh from abc)", EventLevel.INFO),
    (ev.slurm_reconfigured(), "Slurm was reconfigured successfully. Slurm config updated to match desired state",
     EventLevel.INFO),
    (ev.drift_detected(["a", "b"]), "Slurm configuration drift detected: a; b", EventLevel.ERROR),
    (ev.update_batch_selected("c", "g", UpdatePhase.ROLLBACK), "Next rollback batch selected for IG g in Cluster c.",
     EventLevel.WARN),
    (ev.drain_waiting("g", "i-1", ["41", "42"], 60, removal=True),
     "Instance i-1 in IG g runs job(s) 41, 42: drained, waiting up to 60 s for them to end before it is removed",
     EventLevel.INFO),
]


@pytest.mark.parametrize(("draft", "text", "level"), CASES)
def test_wording(draft: ev.EventDraft, text: str, level: EventLevel) -> None:
    assert (draft.description, draft.level) == (text, level)


def test_controller_change_is_an_event_and_a_notification() -> None:
    draft, note = ev.controller_down("c", "ctl", "i-1", "ip-1", backup="ip-2")
    assert draft.description == "Slurm controller ip-1 (instance i-1) in Cluster c is down; backup controller ip-2 " \
                                "takes over"
    assert draft.level == EventLevel.WARN and note.kind == "ControllerDown" and note.description == draft.description
    draft, note = ev.controller_up("c", "ctl", "i-1", "ip-1", primary=True)
    assert draft.description.endswith("is back and serves as primary again") and note.kind == "ControllerUp"
    assert ev.instance_failed("c", "g", "i-1", "boom").details == EventDetails("boom")
    assert ev.jobs_text([str(n) for n in range(22)]).endswith("19 and 2 more")
