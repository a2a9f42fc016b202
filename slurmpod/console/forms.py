"""The console's forms, carried out through the API's operations (``api.app.dispatch``).

"Update software" has a scope (instance-group checkboxes) and a timing:

* ``now`` calls UpdateClusterSoftware for the selected groups;
* ``once`` (a UTC date and time) and ``cron`` (an AWS cron expression) set the selected groups'
  ``ScheduledUpdateConfig`` through UpdateCluster (every other member of every group unchanged), exactly
  what an API client does to schedule an update; the reconciler fires it.

Errors are the API's own messages, attached to the field they concern (``groups``, ``at``, ``cron``) or
to the form as a whole (``form``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmpod.api.app import ApiContext, dispatch_recorded
from slurmpod.api.audit import Origin
from slurmpod.api.model import raise_for_input
from slurmpod.api.translate import deployment_to_wire, scheduled_update_to_wire
from slurmpod.domain.schedule import ScheduleError, parse_schedule
from slurmpod.domain.spec import InstanceGroupSpec
from slurmpod.errors import ServiceError, ValidationException, validation_message
from slurmpod.service.clusters import Caller

TIMINGS = ("now", "once", "cron")
_LOCAL_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})(:\d{2})?")


@dataclass
class UpdateForm:
    groups: list[str] = field(default_factory=list)
    timing: str = "now"
    at: str = ""
    cron: str = ""

    @staticmethod
    def parse(fields: Mapping[str, Sequence[str]]) -> UpdateForm:
        def one(name: str) -> str:
            values = fields.get(name) or [""]
            return values[0].strip()

        return UpdateForm(groups=[g for g in fields.get("group", []) if g], timing=one("timing") or "now",
                          at=one("at"), cron=one("cron"))

    def expression(self) -> str:
        """The ScheduleExpression for a scheduled timing (``at(...)`` or ``cron(...)``)."""
        if self.timing == "once":
            m = _LOCAL_DATETIME.fullmatch(self.at)
            return f"at({m.group(1)}T{m.group(2)}{m.group(3) or ':00'})" if m else f"at({self.at})"
        text = self.cron
        return text if text.startswith("cron(") or text.startswith("at(") else f"cron({text})"


@dataclass
class Outcome:
    message: str = ""  # success (flash)
    errors: dict[str, str] = field(default_factory=dict)  # field -> the API's message

    @property
    def ok(self) -> bool:
        return not self.errors


def _field_of(message: str, timing: str) -> str:
    lowered = message.lower()
    if "scheduleexpression" in lowered:
        return "at" if timing == "once" else "cron"
    if "instancegroups" in lowered or "instance group" in lowered:
        return "groups"
    return "form"


def group_wire(g: InstanceGroupSpec, with_slurm: bool) -> dict[str, Any]:
    """An UpdateCluster InstanceGroups member that leaves the group exactly as it is."""
    out: dict[str, Any] = {"InstanceGroupName": g.name, "InstanceCount": g.instance_count}
    if g.instance_type is not None:
        out["InstanceType"] = g.instance_type
    if g.execution_role is not None:
        out["ExecutionRole"] = g.execution_role
    if g.min_instance_count is not None:
        out["MinInstanceCount"] = g.min_instance_count
    if g.threads_per_core is not None:
        out["ThreadsPerCore"] = g.threads_per_core
    if g.image_id is not None:
        out["ImageId"] = g.image_id
    lcc = g.life_cycle_config
    if lcc is not None:
        wire = {"SourceS3Uri": lcc.source_s3_uri, "OnCreate": lcc.on_create, "OnInitComplete": lcc.on_init_complete}
        out["LifeCycleConfig"] = {k: v for k, v in wire.items() if v is not None}
    sc = g.slurm_config
    if with_slurm and sc is not None and sc.node_type is not None:
        out["SlurmConfig"] = {"NodeType": sc.node_type.value}
        if sc.partition_names:
            out["SlurmConfig"]["PartitionNames"] = list(sc.partition_names)
    out.update(dict(g.extras))
    if g.scheduled_update is not None:
        out["ScheduledUpdateConfig"] = scheduled_update_to_wire(g.scheduled_update)
    return out


def _check_scope(form: UpdateForm, cluster: str) -> str | None:
    """The API's message for an empty scope (UpdateClusterSoftware's InstanceGroups), or None."""
    if form.groups:
        return None
    try:
        raise_for_input("UpdateClusterSoftware", {"ClusterName": cluster, "InstanceGroups": []})
    except ServiceError as err:
        return err.message
    return "Select at least one instance group."  # pragma: no cover - the model requires one


def _check_expression(ctx: ApiContext, form: UpdateForm) -> str | None:
    """The message UpdateCluster gives for this ScheduleExpression (same parser, same wording), or None."""
    try:
        parse_schedule(form.expression(), now=ctx.service.clock.now())
    except ScheduleError as exc:
        return validation_message([exc.message])
    return None


CONSOLE = Origin("", "slurmpod-console", console=True)


def update_software(ctx: ApiContext, caller: Caller, cluster: str, form: UpdateForm,
                    origin: Origin = CONSOLE) -> Outcome:
    out = Outcome()
    if form.timing not in TIMINGS:
        out.errors["timing"] = "Choose when the update starts: now, once at a date and time, or on a cron schedule."
        return out
    scope_error = _check_scope(form, cluster)
    if scope_error:
        out.errors["groups"] = scope_error
    if form.timing == "once" and not form.at:
        out.errors["at"] = "Enter the date and time (UTC) of the one-time update."
    elif form.timing != "now" and scope_error:
        expr_error = _check_expression(ctx, form)  # shown together with the scope error
        if expr_error:
            out.errors[_field_of(expr_error, form.timing)] = expr_error
    if out.errors:
        return out
    try:
        if form.timing == "now":
            dispatch_recorded(ctx, "UpdateClusterSoftware", {
                "ClusterName": cluster, "InstanceGroups": [{"InstanceGroupName": g} for g in form.groups]}, caller,
                origin)
            out.message = f"Software update started for {', '.join(form.groups)}."
        else:
            expr = form.expression()
            _schedule(ctx, caller, cluster, form.groups, expr, origin)
            out.message = f"Software update of {', '.join(form.groups)} scheduled: {expr}."
    except ServiceError as err:
        out.errors[_field_of(err.message, form.timing)] = err.message
    return out


def _schedule(ctx: ApiContext, caller: Caller, cluster: str, groups: Sequence[str], expr: str,
              origin: Origin) -> None:
    rec = ctx.service.resolve(caller, cluster)
    with_slurm = rec.spec.topology_source == "api"
    wire = []
    for g in rec.spec.instance_groups:
        member = group_wire(g, with_slurm)
        if g.name in groups:
            previous = g.scheduled_update.deployment if g.scheduled_update else None
            cfg: dict[str, Any] = {"ScheduleExpression": expr}
            if previous is not None and not previous.empty:
                cfg["DeploymentConfig"] = deployment_to_wire(previous)
            member["ScheduledUpdateConfig"] = cfg
        wire.append(member)
    unknown = [g for g in groups if rec.spec.group(g) is None]
    if unknown:
        raise ValidationException(f"Instance group(s) {', '.join(unknown)} not found in cluster {rec.name}.")
    dispatch_recorded(ctx, "UpdateCluster", {"ClusterName": rec.arn, "InstanceGroups": wire}, caller, origin)


def node_action(ctx: ApiContext, caller: Caller, cluster: str, node_id: str, action: str,
                origin: Origin = CONSOLE) -> Outcome:
    """Reboot or replace one node (BatchRebootClusterNodes / BatchReplaceClusterNodes)."""
    op = {"reboot": "BatchRebootClusterNodes", "replace": "BatchReplaceClusterNodes"}[action]
    out = Outcome()
    try:
        result = dispatch_recorded(ctx, op, {"ClusterName": cluster, "NodeIds": [node_id]}, caller, origin)
    except ServiceError as err:
        out.errors["form"] = err.message
        return out
    failed = result.get("Failed") or []
    if isinstance(failed, list) and failed:
        out.errors["form"] = "; ".join(str(f.get("Message")) for f in failed if isinstance(f, Mapping))
    else:
        out.message = f"{'Reboot' if action == 'reboot' else 'Replacement'} of {node_id} started."
    return out
