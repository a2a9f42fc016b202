"""SlurmControl and the daemon helpers against a fake CommandRunner that records every argv."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from slurmpod.providers.base import CommandResult
from slurmpod.slurm import control
from slurmpod.slurm.admin import NODES_JSON, SOME_NODES_JSON, SlurmControl
from slurmpod.slurm.conf import SlurmTopology, render_cgroup_conf, render_slurm_conf
from slurmpod.slurm.control import SlurmError

SAMPLES = Path(__file__).with_name("samples")
OK = CommandResult(0, "", "")
FAIL = CommandResult(1, "", "nope")

Handler = Callable[[list[str]], CommandResult | None]


@dataclass
class FakeRunner:
    """Answers each argv with the first handler returning a result (default: exit 0, no output)."""

    handlers: list[Handler] = field(default_factory=list)
    calls: list[tuple[list[str], bytes | None, float]] = field(default_factory=list)
    named: list[str | None] = field(default_factory=list)  # each node-JSON query: its comma list (None: all)

    def on(self, prefix: Sequence[str], *results: CommandResult) -> None:
        """Answer argv starting with ``prefix`` with ``results`` in turn (the last one repeats)."""
        queue = list(results)

        def handler(argv: list[str]) -> CommandResult | None:
            if argv[: len(prefix)] != list(prefix):
                return None
            return queue.pop(0) if len(queue) > 1 else queue[0]

        self.handlers.insert(0, handler)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        assert 0 < timeout <= 120
        if argv[:3] == ["sh", "-c", control._READ_PID]:
            return self._read_pid(argv[4], argv[5], timeout)
        if argv == ["sh", "-c", NODES_JSON] or argv[:3] == ["sh", "-c", SOME_NODES_JSON]:
            # scontrol's JSON (Slurm >= 23.02), else sinfo's; the named nodes' query is answered with all of them
            # (as 22.05's sinfo does): SlurmControl keeps the named ones
            self.named.append(argv[4] if len(argv) > 4 else None)
            res = self.run(["scontrol", "show", "nodes", "--json"], timeout=timeout)
            return res if res.returncode == 0 and res.stdout else self.run(["sinfo", "--json"], timeout=timeout)
        self.calls.append((list(argv), input, timeout))
        for h in self.handlers:
            r = h(list(argv))
            if r is not None:
                return r
        if argv[0] in ("test", "pgrep"):  # probes: "no" unless a test says otherwise
            return CommandResult(1, "", "")
        return OK

    def _read_pid(self, pid_file: str, comm: str, timeout: float) -> CommandResult:
        """``control.read_pid``'s one shell command, answered from the handlers of the ``cat`` calls it makes."""
        pid = self.run(["cat", pid_file], timeout=timeout)
        if pid.returncode != 0 or not pid.stdout.strip().isdigit():
            return CommandResult(1, "", "")
        name = self.run(["cat", f"/proc/{pid.stdout.strip()}/comm"], timeout=timeout)
        ok = name.returncode == 0 and name.stdout.strip() == comm
        return CommandResult(0, pid.stdout, "") if ok else CommandResult(1, "", "")

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        return list(argv)

    def argvs(self) -> list[list[str]]:
        return [c[0] for c in self.calls]

    def index(self, prefix: Sequence[str]) -> int:
        for i, a in enumerate(self.argvs()):
            if a[: len(prefix)] == list(prefix):
                return i
        raise AssertionError(f"{prefix} never ran; ran: {self.argvs()}")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


CONF = render_slurm_conf(SlurmTopology("c", (("ctl1", "10.0.0.10"),), (("compute", "compute"),)))


def test_write_file_is_install_then_rename() -> None:
    r = FakeRunner()
    control.write_file(r, "/etc/munge/munge.key", b"k" * 8, 0o400, "munge")
    assert r.calls[0] == (
        [
            "install",
            "-D",
            "-m",
            "0400",
            "-o",
            "munge",
            "-g",
            "munge",
            "/dev/stdin",
            "/etc/munge/munge.key.slurmpod-tmp",
        ],
        b"k" * 8,
        control.CMD_TIMEOUT,
    )
    assert r.argvs()[1] == ["mv", "-f", "/etc/munge/munge.key.slurmpod-tmp", "/etc/munge/munge.key"]


def test_write_file_failure_raises() -> None:
    r = FakeRunner()
    r.on(["install"], CommandResult(1, "", "install: invalid user"))
    with pytest.raises(SlurmError, match="invalid user"):
        control.write_file(r, "/x", b"", 0o644, "nobody:nogroup")


def test_start_munge() -> None:
    r, clock = FakeRunner(), FakeClock()
    r.on(["munge", "-n"], FAIL, FAIL, OK)
    control.start_munge(r, b"KEY", sleep=clock.sleep, clock=clock)
    argvs = r.argvs()
    assert ["install", "-d", "-m", "0755", "-o", "munge", "-g", "munge", "/run/munge"] in argvs
    key_call = next(c for c in r.calls if c[0][-1] == "/etc/munge/munge.key.slurmpod-tmp")
    assert key_call[1] == b"KEY" and key_call[0][2:8] == ["-m", "0400", "-o", "munge", "-g", "munge"]
    start = r.index(["setpriv"])
    assert argvs[start] == [
        "setpriv",
        "--reuid=munge",
        "--regid=munge",
        "--init-groups",
        "/usr/sbin/munged",
        "--num-threads=2",
    ]
    assert start > r.index(["mv", "-f", "/etc/munge/munge.key.slurmpod-tmp"])


def test_start_munge_is_idempotent() -> None:
    r = FakeRunner()
    control.start_munge(r, b"KEY")
    assert r.argvs() == [["munge", "-n"]]


def test_start_munge_failure_has_log_tail() -> None:
    r, clock = FakeRunner(), FakeClock()
    r.on(["munge", "-n"], FAIL)
    r.on(["tail"], CommandResult(0, "munged: Error: Keyfile is insecure\n", ""))
    with pytest.raises(SlurmError) as e:
        control.start_munge(r, b"KEY", timeout=1, sleep=clock.sleep, clock=clock)
    assert "Keyfile is insecure" in e.value.log_tail
    assert ["tail", "-n", "30", "/var/log/munge/munged.log"] in r.argvs()


def _ctl_runner(running_after_start: bool = True) -> FakeRunner:
    r = FakeRunner()
    r.on(["hostname"], CommandResult(0, "ctl1\n", ""))
    state = {"started": False}

    def slurmctld(argv: list[str]) -> CommandResult | None:
        if argv == ["/usr/sbin/slurmctld"]:
            state["started"] = running_after_start
            return OK
        if argv == ["cat", "/run/slurmctld.pid"]:
            return CommandResult(0, "42\n", "") if state["started"] else FAIL
        if argv == ["cat", "/proc/42/comm"]:
            return CommandResult(0, "slurmctld\n", "") if state["started"] else FAIL
        if argv == ["kill", "-TERM", "42"]:
            state["started"] = False
            return OK
        if argv == ["kill", "-0", "42"]:
            return OK if state["started"] else FAIL
        if argv == ["scontrol", "ping"]:
            return CommandResult(0, "Slurmctld(primary) at ctl1 is UP\n", "") if state["started"] else FAIL
        return None

    r.handlers.append(slurmctld)
    return r


def test_start_slurmctld() -> None:
    r, clock = _ctl_runner(), FakeClock()
    control.start_slurmctld(r, CONF, render_cgroup_conf(), sleep=clock.sleep, clock=clock)
    argvs = r.argvs()
    # the directories and the start-time confs in one tar; slurm.conf atomically (temp file + rename)
    tars = [c for c in r.calls if c[0][:2] == ["tar", "-x"]]
    assert len(tars) == 1 and tars[0][1] is not None
    with tarfile.open(fileobj=io.BytesIO(tars[0][1])) as tar:
        members = {m.name: m for m in tar.getmembers()}
        state = members["var/lib/slurm/slurmctld"]
        assert state.isdir() and (state.mode, state.uname) == (0o755, "slurm")
        cgroup = tar.extractfile(members["etc/slurm/cgroup.conf"])
        assert cgroup is not None and cgroup.read() == render_cgroup_conf().encode()
        assert {"etc/slurm/plugstack.conf", "etc/slurm/oci.conf"} <= set(members)
        assert "etc/slurm/slurm.conf" not in members
    written = {c[0][-1]: c[1] for c in r.calls if c[0][:2] == ["install", "-D"]}
    assert written["/etc/slurm/slurm.conf.slurmpod-tmp"] == CONF.encode()
    assert ["sh", "-c", control.LINK_OPT_SLURM_CONF, "sh", "/etc/slurm/slurm.conf"] in argvs
    assert r.index(["/usr/sbin/slurmctld"]) > r.index(["mv", "-f", "/etc/slurm/slurm.conf.slurmpod-tmp"])
    assert ["scontrol", "ping"] in argvs
    assert not any("reconfigure" in a for a in argvs)


def test_start_slurmctld_dies_with_log_tail() -> None:
    r, clock = _ctl_runner(running_after_start=False), FakeClock()
    r.on(["tail"], CommandResult(0, "fatal: Incorrect permissions on state save loc\n", ""))
    with pytest.raises(SlurmError) as e:
        control.start_slurmctld(r, CONF, render_cgroup_conf(), sleep=clock.sleep, clock=clock)
    assert "exited" in e.value.message
    assert "state save loc" in e.value.log_tail and "state save loc" in str(e.value)


def test_restart_slurmctld_is_graceful() -> None:
    r, clock = _ctl_runner(), FakeClock()
    control.start_slurmctld(r, CONF, render_cgroup_conf(), sleep=clock.sleep, clock=clock)
    r.calls.clear()
    new_conf = CONF + "KillWait=20\n"
    control.restart_slurmctld(r, new_conf, render_cgroup_conf(), sleep=clock.sleep, clock=clock)
    term = r.index(["kill", "-TERM", "42"])
    assert r.index(["mv", "-f", "/etc/slurm/slurm.conf.slurmpod-tmp"]) > term
    assert r.index(["/usr/sbin/slurmctld"]) > term
    assert not any("reconfigure" in a for a in r.argvs())


def test_restart_slurmctld_timeout_when_it_will_not_exit() -> None:
    r, clock = _ctl_runner(), FakeClock()
    r.on(["cat", "/run/slurmctld.pid"], CommandResult(0, "42\n", ""))
    r.on(["cat", "/proc/42/comm"], CommandResult(0, "slurmctld\n", ""))
    r.on(["kill", "-0", "42"], OK)
    with pytest.raises(SlurmError, match="did not exit"):
        control.restart_slurmctld(r, CONF, "", timeout=5, sleep=clock.sleep, clock=clock)


def test_pid_reuse_is_not_killed() -> None:
    r = FakeRunner()
    r.on(["cat", "/run/slurmd.pid"], CommandResult(0, "7\n", ""))
    r.on(["cat", "/proc/7/comm"], CommandResult(0, "bash\n", ""))
    assert control.stop_slurmd(r) is False
    assert not any(a[0] == "kill" for a in r.argvs())


def test_start_slurmd_argv() -> None:
    r, clock = FakeRunner(), FakeClock()
    state = {"started": False}

    def slurmd(argv: list[str]) -> CommandResult | None:
        if argv[0] == "/usr/sbin/slurmd":
            state["started"] = True
            return OK
        if argv == ["cat", "/run/slurmd.pid"]:
            return CommandResult(0, "9\n", "") if state["started"] else FAIL
        if argv == ["cat", "/proc/9/comm"]:
            return CommandResult(0, "slurmd\n", "")
        return None

    r.handlers.append(slurmd)
    servers = control.conf_server_arg(["10.0.0.10", "10.0.0.9"])
    control.start_slurmd(r, servers, 8, 30000, "gpu-a", gres="gpu:1", sleep=clock.sleep, clock=clock)
    assert [
        "/usr/sbin/slurmd",
        "-Z",
        "--conf-server",
        "10.0.0.10:6817,10.0.0.9:6817",
        "--conf",
        "CPUs=8 RealMemory=30000 Feature=gpu-a Gres=gpu:1",
    ] in r.argvs()
    assert ["sh", "-c", control.LINK_OPT_SLURM_CONF, "sh", "/run/slurm/conf/slurm.conf"] in r.argvs()


@pytest.mark.parametrize("unit_type", ["notify", "simple"])
def test_start_slurmd_on_a_systemd_node(unit_type: str) -> None:
    """The node layer's unit: options from its env file (written only when they differ: a compute node's baseline
    wrote them), one START; a Type=notify unit is ready once started (no pid check), a simple one is looked for."""
    from slurmpod.slurm import units

    r, clock = FakeRunner(), FakeClock()
    servers = control.conf_server_arg(["10.0.0.10"])
    unit = (f"[Service]\nType={unit_type}\nEnvironmentFile=-{units.SLURMD_ENV}\n"
            f"ExecStart=/opt/slurm/sbin/slurmd --systemd {units.PLACEHOLDER}\n")
    env = units.slurmd_env(servers)
    assert env.path == units.SLURMD_ENV and env.content == b"SLURMD_OPTIONS=--conf-server 10.0.0.10:6817\n"
    r.on(["test", "-d", "/run/systemd/system"], OK)
    r.on(["sh", "-c", 'cat "$1"; printf "\\0"; cat "$2" 2>/dev/null'],
         CommandResult(0, unit + "\0" + env.content.decode(), ""))
    r.on(["cat", "/run/slurmd.pid"], CommandResult(0, "9\n", ""))
    r.on(["cat", "/proc/9/comm"], CommandResult(0, "slurmd\n", ""))
    control.start_slurmd(r, servers, 2, 1000, "compute", sleep=clock.sleep, clock=clock, prepared=True)
    argvs = r.argvs()
    assert not any(a[0] in ("install", "mv") for a in argvs)  # the env file was current
    assert [a[3:] for a in argvs if a[:3] == ["sh", "-c", units.START]] == [["sh", "slurmd", "enable", "keep"]]
    looked = ["cat", "/run/slurmd.pid"] in argvs
    assert looked is (unit_type == "simple")
    assert argvs[-1] == ["sh", "-c", control.LINK_OPT_SLURM_CONF, "sh", "/run/slurm/conf/slurm.conf"]


def test_configure_login_writes_a_copy() -> None:
    r = FakeRunner()
    control.configure_login(r, CONF)
    written = {c[0][-1]: c[1] for c in r.calls if c[0][:2] == ["install", "-D"]}
    assert written == {"/etc/slurm/slurm.conf.slurmpod-tmp": CONF.encode()}
    assert ["sh", "-c", control.LINK_OPT_SLURM_CONF, "sh", "/etc/slurm/slurm.conf"] in r.argvs()


def test_parse_ping() -> None:
    text = "Slurmctld(primary) at ip-10-0-0-10 is UP\nSlurmctld(backup) at ip-10-0-0-9 is DOWN\n"
    assert control.parse_ping(text) == {"ip-10-0-0-10": True, "ip-10-0-0-9": False}
    assert control.parse_ping("garbage") == {}


def test_admin_commands() -> None:
    r = FakeRunner()
    sc = SlurmControl(r)
    sc.drain("ip-1", "root volume replacement")
    sc.drain("ip-2", "slurmpod: already prefixed")
    sc.resume("ip-1")
    assert r.argvs() == [
        ["scontrol", "update", "nodename=ip-1", "state=drain", "reason=slurmpod: root volume replacement"],
        ["scontrol", "update", "nodename=ip-2", "state=drain", "reason=slurmpod: already prefixed"],
        ["scontrol", "update", "nodename=ip-1", "state=resume"],
    ]
    r.on(["scontrol", "update"], CommandResult(1, "", "slurm_update error: Invalid node name specified"))
    with pytest.raises(SlurmError):
        sc.resume("ghost")


def test_delete_node() -> None:
    r = FakeRunner()
    sc = SlurmControl(r)
    assert sc.delete_node("ip-1") is True
    assert r.argvs() == [["scontrol", "delete", "nodename=ip-1"]]
    r.on(["scontrol", "delete"], CommandResult(1, "", "delete_node nodename=x: Invalid node name specified"))
    assert sc.delete_node("x") is False
    r.on(["scontrol", "delete"], CommandResult(1, "", "delete_node nodename=x: Requested nodes are busy"))
    with pytest.raises(SlurmError, match="busy"):
        sc.delete_node("x")


def test_nodes_and_wait() -> None:
    r, clock = FakeRunner(), FakeClock()
    idle = CommandResult(0, (SAMPLES / "sinfo_idle.json").read_text(), "")
    r.on(["sinfo", "--json"], CommandResult(1, "", "down"), idle)
    sc = SlurmControl(r, sleep=clock.sleep, clock=clock)
    assert sc.wait_for_nodes(["ip-10-239-77-11", "ip-10-239-77-13"], timeout=5) == {
        "ip-10-239-77-11",
        "ip-10-239-77-13",
    }
    assert sc.wait_for_nodes(["ip-10-239-77-11", "ip-9-9-9-9"], timeout=2) == {"ip-10-239-77-11"}
    assert clock.now >= 2
    node = sc.node("ip-10-239-77-12")
    assert node is not None and node.is_idle()
    r.on(["sinfo", "--json"], CommandResult(0, (SAMPLES / "sinfo_mixed_states.json").read_text(), ""))
    assert sc.wait_for_idle(["ip-10-239-77-13"], timeout=1) == {"ip-10-239-77-13"}
    assert sc.wait_for_idle(["ip-10-239-77-12"], timeout=1) == set()
    # each wait asks Slurm for its own nodes only (a comma list), never the whole cluster's JSON
    assert set(r.named) >= {"ip-10-239-77-11,ip-10-239-77-13", "ip-10-239-77-11,ip-9-9-9-9", "ip-10-239-77-12"}
    assert None not in r.named
    assert sc.nodes([]) == []
    all_nodes = sc.nodes()
    assert r.named[-1] is None and len(all_nodes) > 1
