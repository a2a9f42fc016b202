"""Multi-head decisions (hand-over, controller lists) against fake runners: which commands run where."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurmpod.domain.model import NodeRecord
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, SlurmConfig
from slurmpod.domain.status import InstanceStatus, NodeType
from slurmpod.providers.base import CommandResult
from slurmpod.reconciler import headnodes

OK = CommandResult(0, "", "")


class Runner:
    """Answers ``scontrol ping`` with ``ping`` and records every argv."""

    def __init__(self, ping: Mapping[str, bool], answers: Mapping[str, CommandResult] | None = None) -> None:
        self.ping = ping
        self.answers = dict(answers or {})
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, timeout: float, input: bytes | None = None,
            env: Mapping[str, str] | None = None, cwd: str | None = None) -> CommandResult:
        self.calls.append(list(argv))
        if list(argv[:2]) == ["scontrol", "ping"]:
            lines = [f"Slurmctld({'primary' if i == 0 else 'backup'}) at {h} is {'UP' if up else 'DOWN'}"
                     for i, (h, up) in enumerate(self.ping.items())]
            return CommandResult(0, "\n".join(lines) + "\n", "")
        return self.answers.get(argv[0], OK)

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        return list(argv)


def _ctl(n: int, group: str = "ctl") -> NodeRecord:
    return NodeRecord(instance_id=f"i-{n}", cluster_id="c", group=group, seq=n, status=InstanceStatus.RUNNING,
                      launch_time=0.0, ip=f"10.0.0.{n}", hostname=f"h{n}", phases=("daemons",))


def test_ctld_hosts_keeps_order() -> None:
    conf = "ClusterName=x\nSlurmctldHost=a(10.0.0.1)\nSlurmctldHost=b(10.0.0.2)\nSlurmctldPort=6817\n"
    assert headnodes.ctld_hosts(conf) == ["SlurmctldHost=a(10.0.0.1)", "SlurmctldHost=b(10.0.0.2)"]


def test_controller_in_charge_hands_over_to_the_first_live_backup() -> None:
    a, b, c = _ctl(1), _ctl(2), _ctl(3)
    runners = {n.instance_id: Runner({"h1": True, "h2": True, "h3": True}) for n in (a, b, c)}
    headnodes.hand_over(a, [a, b, c], {"i-1": True, "i-2": False, "i-3": True}, lambda n: runners[n.instance_id])
    assert ["scontrol", "takeover", "2"] in runners["i-3"].calls  # i-2 is dead: index 2 takes over
    assert not any(call[:2] == ["scontrol", "takeover"] for call in runners["i-2"].calls)


def test_a_backup_stopping_hands_nothing_over() -> None:
    a, b = _ctl(1), _ctl(2)
    runners = {n.instance_id: Runner({"h1": True, "h2": True}) for n in (a, b)}
    headnodes.hand_over(b, [a, b], {"i-1": True, "i-2": True}, lambda n: runners[n.instance_id])
    assert all(call[:2] != ["scontrol", "takeover"] for r in runners.values() for call in r.calls)


def test_single_controller_hands_nothing_over() -> None:
    a = _ctl(1)
    r = Runner({"h1": True})
    headnodes.hand_over(a, [a], {"i-1": True}, lambda n: r)
    assert r.calls == []


def test_refresh_restarts_only_controllers_with_another_list() -> None:
    a, b = _ctl(1), _ctl(3)
    conf = "SlurmctldHost=h1(10.0.0.1)\nSlurmctldHost=h3(10.0.0.3)\n"
    same = Runner({}, {"cat": CommandResult(0, conf, "")})
    headnodes.refresh_controllers(b, [a, b], {"i-1": True, "i-3": True}, lambda n: same, conf)
    assert all(call[0] == "cat" for call in same.calls)  # nothing restarted


def test_refresh_conf_servers_restarts_stale_slurmds_only(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    restarted: list[tuple[Runner, list[str]]] = []
    monkeypatch.setattr(headnodes.control, "stop_slurmd", lambda r, timeout: True)
    monkeypatch.setattr(headnodes.control, "start_slurmd",
                        lambda r, servers, cpus, mem, feature, gres=None, prepared=False:
                        restarted.append((r, list(servers))))
    spec = ClusterSpec(name="x", instance_groups=(
        InstanceGroupSpec(name="ctl", instance_count=1, slurm_config=SlurmConfig(NodeType.CONTROLLER)),
        InstanceGroupSpec(name="work", instance_count=2, instance_type="ml.c5.large",
                          slurm_config=SlurmConfig(NodeType.COMPUTE, ("work",))),
    ))
    ctl = _ctl(1)
    fresh, stale = _ctl(5, "work"), _ctl(6, "work")
    want = "--conf-server 10.0.0.1:6817 --conf"
    runners = {
        "i-5": Runner({}, {"pgrep": CommandResult(0, f"9 /usr/sbin/slurmd -Z {want} CPUs=2\n", "")}),
        "i-6": Runner({}, {"pgrep": CommandResult(0, "9 /usr/sbin/slurmd -Z --conf-server 10.0.0.9:6817 --conf x\n",
                                                  "")}),
        "i-1": Runner({}),
    }
    headnodes.refresh_conf_servers(spec, [ctl, fresh, stale], [ctl], lambda n: runners[n.instance_id], lambda: "")
    assert restarted == [(runners["i-6"], ["10.0.0.1:6817"])]


def test_backups_stop_before_the_primary_starts_and_start_after() -> None:
    a, b, c = _ctl(1), _ctl(2), _ctl(3)
    booting = NodeRecord(instance_id="i-4", cluster_id="c", group="ctl", seq=4, status=InstanceStatus.PENDING,
                         launch_time=0.0, ip="10.0.0.4", hostname="h4", phases=("launched",))
    runners = {n.instance_id: Runner({n.hostname or "": True}, {"hostname": CommandResult(0, f"{n.hostname}\n", "")})
               for n in (a, b, c, booting)}
    alive = {"i-1": True, "i-2": True, "i-3": False, "i-4": True}
    headnodes.stop_backups(a, [a, b, c, booting], alive, lambda n: runners[n.instance_id])
    # only i-2 (live, its slurmctld started once); the dead one and the one still booting are left alone
    assert any("slurmctld" in " ".join(call) for call in runners["i-2"].calls)
    assert not runners["i-1"].calls and not runners["i-3"].calls and not runners["i-4"].calls
    runners["i-2"].calls.clear()
    headnodes.start_backups(a, [a, b, c, booting], alive, lambda n: runners[n.instance_id])
    assert runners["i-2"].calls and not runners["i-1"].calls and not runners["i-3"].calls


def test_a_stopping_controller_refuses_new_connections_until_it_is_down() -> None:
    """iptables rejects new SlurmctldPort connections with a TCP reset (clients go on to the next controller),
    the rule ends by itself 30 s later if never removed, and is removed when the stop is done."""
    from datetime import UTC, datetime

    r = Runner({})
    slept: list[float] = []
    with headnodes.refusing_clients(r, now=lambda: datetime(2026, 12, 2, 16, 0, 0, tzinfo=UTC), sleep=slept.append):
        r.calls.append(["systemctl", "stop", "slurmctld"])
    rule = ["INPUT", "-p", "tcp", "--dport", "6817", "--syn", "-m", "time", "--datestop", "2026-12-02T16:00:30",
            "-j", "REJECT", "--reject-with", "tcp-reset"]
    assert r.calls == [["iptables", "-w", "5", "-I", *rule], ["systemctl", "stop", "slurmctld"],
                       ["iptables", "-w", "5", "-D", *rule]]
    assert slept == [headnodes.DRAIN_SECONDS]  # the accept queue is served before the stop


def test_a_node_without_iptables_stops_its_controller_as_before() -> None:
    r = Runner({}, {"iptables": CommandResult(127, "", "iptables: not found")})
    slept: list[float] = []
    with headnodes.refusing_clients(r, sleep=slept.append):
        r.calls.append(["systemctl", "stop", "slurmctld"])
    assert [c[0] for c in r.calls] == ["iptables", "systemctl"] and slept == []
