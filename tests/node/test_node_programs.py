"""The node-side programs (``slurmpod.node``) in isolation: checks on a fake node root, the agent's marks, the
auto-resume supervisor's parsing, and how the programs are shipped (boot files)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slurmpod.lifecycle import nodeprograms
from slurmpod.node import auto_resume, checks, faults, health_agent


def _gpu_root(tmp_path: Path, count: int = 2) -> Path:
    (tmp_path / "etc/slurmpod").mkdir(parents=True)
    (tmp_path / "dev").mkdir()
    lines = ["# slurmpod: this node's GPUs"]
    for k in range(count):
        (tmp_path / f"dev/nvidia{k}").symlink_to("/dev/null")  # a character device, as the emulated ones
        lines.append(f"Name=gpu Type=h100 File=/dev/nvidia{k}")
    (tmp_path / "etc/slurmpod/gres.conf").write_text("\n".join(lines) + "\n")
    return tmp_path


def _mark(root: Path, kind: str, **data: object) -> None:
    d = root / faults.FAULT_DIR.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / kind).write_text(json.dumps({"kind": kind, **data}))


def test_gpus_healthy_then_xid_then_lost(tmp_path: Path) -> None:
    root = _gpu_root(tmp_path)
    assert checks.gpu_devices(str(root)) == ["/dev/nvidia0", "/dev/nvidia1"]
    ok = checks.check_gpus(str(root))
    assert ok.ok and ok.detail == "2 GPUs healthy"
    _mark(root, "gpu-xid", gpu=1, xid=79)
    bad = checks.check_gpus(str(root))
    assert not bad.ok and bad.action == "replace" and bad.fault == "NvidiaGPUUnhealthy"
    assert "GPU 1: Xid 79" in bad.detail
    (root / faults.FAULT_DIR.lstrip("/") / "gpu-xid").unlink()
    (root / "dev/nvidia1").unlink()
    lost = checks.check_gpus(str(root))
    assert not lost.ok and lost.fault == "NvidiaGPUCountMismatch" and "1 of 2 GPUs present" in lost.detail


def test_a_regular_file_is_no_gpu_and_a_cpu_node_has_none(tmp_path: Path) -> None:
    root = _gpu_root(tmp_path, 1)
    (root / "dev/nvidia0").unlink()
    (root / "dev/nvidia0").write_text("")
    assert not checks.check_gpus(str(root)).ok
    assert checks.check_gpus(str(tmp_path / "nothing")).ok


def test_unknown_or_unreadable_markers(tmp_path: Path) -> None:
    d = tmp_path / faults.FAULT_DIR.lstrip("/")
    d.mkdir(parents=True)
    (d / "gpu-xid").write_text("not json")
    (d / "unknown-kind").write_text("{}")
    assert faults.active(str(tmp_path)) == {"gpu-xid": {}}


def test_memory_and_disk(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 1000000 kB\nMemAvailable: 5000 kB\n")
    low = checks.check_memory(str(meminfo))
    assert not low.ok and low.action == "reboot"
    meminfo.write_text("MemTotal: 1000000 kB\nMemAvailable: 500000 kB\n")
    assert checks.check_memory(str(meminfo)).ok
    assert checks.check_disk(str(tmp_path)).ok or "MiB free" in checks.check_disk(str(tmp_path)).detail


def test_agent_marks_with_hyperpods_exact_reasons() -> None:
    xid = checks.Result("gpu", False, "GPU 0: Xid 79", "replace", "NvidiaGPUUnhealthy")
    hang = checks.Result("slurmd", False, "stopped", "reboot", "SlurmdUnresponsive")
    assert health_agent.reason_for(xid) == ("fail", "Action:Replace")
    assert health_agent.reason_for(hang) == ("fail", "Action:Reboot")


def test_agent_needs_strikes_for_daemons_but_not_for_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(health_agent, "STATE_FILE", str(tmp_path / "health.json"))
    results = [checks.Result("slurmd", False, "gone", "reboot", "SlurmdNotRunning")]
    monkeypatch.setattr(checks, "run_all", lambda compute, rpc=True, slurmd=None: results)
    agent = health_agent.Agent({"interval": 1}, "ip-10-0-0-1")
    assert agent.one_pass() is None and agent.one_pass() is None
    assert agent.one_pass() is results[0]  # the third pass in a row
    results[:] = [checks.Result("gpu", False, "GPU 0: Xid 79", "replace", "NvidiaGPUUnhealthy")]
    fault = agent.one_pass()
    assert fault is not None and fault.name == "gpu"
    state = json.loads((tmp_path / "health.json").read_text())
    assert state["hostname"] == "ip-10-0-0-1" and state["results"][0]["ok"] is False


def test_the_pass_that_arms_asks_slurmd_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(health_agent, "STATE_FILE", str(tmp_path / "health.json"))
    asked: list[bool] = []

    def slurmd(rpc: bool = True) -> checks.Result:
        asked.append(rpc)
        return checks.Result("slurmd", True, "slurmd answers")

    monkeypatch.setattr(checks, "check_slurmd", slurmd)
    monkeypatch.setattr(checks, "check_munge", lambda rpc=True: checks.Result("munged", True, "munge answers"))
    monkeypatch.setattr(checks, "check_gpus", lambda: checks.Result("gpu", True))
    agent = health_agent.Agent({"interval": 1, "rpc_interval": 30}, "ip-10-0-0-1")
    agent.arm()
    assert agent.armed and agent.one_pass() is None
    assert asked == [True]  # arm's RPC is the first pass's
    agent.arm()
    agent.one_pass()
    assert asked == [True, False]  # armed: no RPC until rpc_interval passed


def test_scontrol_records_with_reasons_that_have_spaces() -> None:
    line = ("NodeName=ip-10-1-0-5 Arch=x86_64 CoresPerSocket=1 State=IDLE+FAIL ThreadsPerCore=1 "
            "Reason=Action:Replace [root@2026-12-01T17:35:06] Comment=(null)")
    rec = auto_resume.parse_record(line)
    assert rec["NodeName"] == "ip-10-1-0-5" and rec["State"] == "IDLE+FAIL"
    assert rec["Reason"].split(" [", 1)[0] == "Action:Replace"
    job = auto_resume.parse_record("JobId=7 JobName=x AllocTRES=cpu=2,mem=1G,node=2,billing=2,gres/gpu=16 "
                                   "BatchHost=ip-10-1-0-5 NodeList=ip-10-1-0-[5-6]")
    assert auto_resume.has_gres(job) and job["BatchHost"] == "ip-10-1-0-5"
    assert not auto_resume.has_gres(auto_resume.parse_record("JobId=8 AllocTRES=cpu=2,mem=1G,node=2"))


def test_programs_ship_as_boot_files_with_the_agent_unit() -> None:
    files = {f.path: f for f in nodeprograms.program_files()}
    for module in ("health_agent.py", "checks.py", "faults.py", "fault.py", "auto_resume.py", "__init__.py"):
        assert f"{nodeprograms.PACKAGE_DIR}/{module}" in files
    for exe in ("slurmpod-health", "slurmpod-fault", "auto-resume"):
        f = files[f"{nodeprograms.BIN}/{exe}"]
        assert f.mode == 0o755 and f.content.startswith(b"#!/usr/bin/python3")
    assert "ConditionPathExists=/etc/slurmpod/health.json" in files[
        "/etc/systemd/system/slurmpod-health.service"].content.decode()
    # the agent starts with slurmd, not at boot (a compute node's slurmd starts after its lifecycle scripts)
    assert "/etc/systemd/system/multi-user.target.wants/slurmpod-health.service" not in files
    link = files["/etc/systemd/system/slurmd.service.wants/slurmpod-health.service"]
    assert link.link == "/etc/systemd/system/slurmpod-health.service"
    assert not any(p.endswith(".c") for p in files)  # the SPANK plugin is built into the image, not shipped
    cfg = json.loads(nodeprograms.health_config().content)
    assert cfg["compute"] is True and cfg["interval"] > 0


def test_the_wrappers_run_the_shipped_modules(tmp_path: Path) -> None:
    """The boot files, written under a scratch root, run with this python: the fault program lists nothing."""
    import subprocess
    import sys

    for f in nodeprograms.program_files():
        if f.link or not f.path.startswith(nodeprograms.PREFIX):
            continue
        dest = tmp_path / f.path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(f.content)
        os.chmod(dest, f.mode)
    code = (f"import sys; sys.path.insert(0, {str(tmp_path / nodeprograms.PREFIX.lstrip('/'))!r}); "
            "from slurmpod_node import fault; sys.exit(fault.main(['list']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and json.loads(r.stdout) == {}


def test_a_wrapper_runs_through_its_shebang_as_the_kernel_splits_it(tmp_path: Path) -> None:
    """The kernel passes everything after a shebang's interpreter as ONE argument: the wrapper's options must
    work that way (``#!/usr/bin/python3 -I -S`` made every node program fail with "Unknown option: - ")."""
    import subprocess
    import sys

    prefix = tmp_path / "lib"
    for name, content in nodeprograms.modules().items():
        (prefix / "slurmpod_node").mkdir(parents=True, exist_ok=True)
        (prefix / "slurmpod_node" / name).write_bytes(content)
    script = tmp_path / "slurmpod-fault"
    script.write_text(nodeprograms.WRAPPER.format(package=prefix / "slurmpod_node", prefix=prefix, module="fault"))
    line = script.read_text().splitlines()[0]
    assert line.startswith("#!/usr/bin/python3")
    _, _, arg = line[2:].strip().partition(" ")
    argv = [sys.executable, *([arg.strip()] if arg.strip() else []), str(script), "list"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and json.loads(r.stdout) == {}, r.stderr
