"""Running lifecycle scripts in a node through a CommandRunner (host-directory test double)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from slurmpod.lifecycle.resource_config import (
    RESOURCE_CONFIG_PATH,
    ResourceGroup,
    ResourceInstance,
    render_resource_config,
)
from slurmpod.lifecycle.run import (
    DEFAULT_LOG_PATH,
    DEFAULT_NODE_DIR,
    LifecycleRunError,
    ScriptResult,
    format_failure,
    resolve_entry_point,
    run_lifecycle_script,
    write_node_file,
)
from slurmpod.lifecycle.sources import LifecycleSourceError
from tests.lifecycle.conftest import LocalDirRunner

ON_CREATE = """\
echo "cwd=$(pwd)"
echo "user=$(id -u)"
echo "digest=$SLURMPOD_LIFECYCLE_DIGEST"
echo "custom=${CUSTOM:-unset}"
echo "leak=${SECRET_FROM_HOST:-none}"
group=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["InstanceGroups"][0]["Name"])' \
  "$NODE_ROOT/opt/ml/config/resource_config.json")
echo "group=$group"
cat lib/helper.txt
echo "to stderr" >&2
test -f provisioning_parameters.json && echo "pp=$(cat provisioning_parameters.json)"
exit "${EXIT_WITH:-0}"
"""


def node_path(runner: LocalDirRunner, path: str) -> Path:
    return Path(runner.map(path))


def test_write_node_file(node_runner: LocalDirRunner) -> None:
    text = render_resource_config(
        [ResourceGroup("workers", "ml.c5.large", (ResourceInstance("i-1", "10.0.0.5"),))]
    )
    write_node_file(node_runner, RESOURCE_CONFIG_PATH, text)
    written = node_path(node_runner, RESOURCE_CONFIG_PATH)
    assert json.loads(written.read_text())["InstanceGroups"][0]["Name"] == "workers"
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    write_node_file(node_runner, "/opt/x/secret", b"k", mode=0o600)
    assert stat.S_IMODE(node_path(node_runner, "/opt/x/secret").stat().st_mode) == 0o600
    assert node_runner.calls[0][:4] == ["install", "-D", "-m", "644"]
    with pytest.raises(LifecycleRunError):
        write_node_file(node_runner, "relative/path", "x")
    with pytest.raises(LifecycleRunError):
        write_node_file(node_runner, "/opt/../etc/passwd", "x")


def test_run_script_success(node_runner: LocalDirRunner, make_snapshot, monkeypatch) -> None:
    monkeypatch.setenv("SECRET_FROM_HOST", "leaked")
    snap = make_snapshot({"on_create.sh": ON_CREATE, "lib/helper.txt": "helper here\n"})
    write_node_file(
        node_runner,
        RESOURCE_CONFIG_PATH,
        render_resource_config(
            [ResourceGroup("ctl", "ml.c5.xlarge", (ResourceInstance("i-1", "10.0.0.2"),))]
        ),
    )
    result = run_lifecycle_script(
        node_runner,
        snap,
        "on_create.sh",
        env={"CUSTOM": "yes", "NODE_ROOT": str(node_runner.root)},
        extra_files={"provisioning_parameters.json": b'{"controller_group": "ctl"}'},
    )
    workdir = node_path(node_runner, f"{DEFAULT_NODE_DIR}/{snap.hex}")
    assert result.exit_code == 0 and result.ok and not result.timed_out
    assert result.digest == snap.digest
    lines = result.log_tail.splitlines()
    assert f"cwd={workdir}" in lines
    assert f"user={os.getuid()}" in lines
    assert f"digest={snap.digest}" in lines
    assert "custom=yes" in lines
    assert "leak=none" in lines  # clean environment
    assert "group=ctl" in lines
    assert "helper here" in lines
    assert "to stderr" in lines
    assert 'pp={"controller_group": "ctl"}' in lines
    assert not any("slurmpod:" in ln for ln in lines)  # header/footer stay in the log only
    log = node_path(node_runner, DEFAULT_LOG_PATH).read_text()
    assert f"slurmpod: running on_create.sh ({snap.digest})" in log
    assert "exited with code 0" in log
    assert "to stderr" in log
    # the snapshot was copied with its modes; nothing else was created in the node
    assert sorted(p.relative_to(workdir).as_posix() for p in workdir.rglob("*") if p.is_file()) == [
        "lib/helper.txt",
        "on_create.sh",
        "provisioning_parameters.json",
    ]
    top = sorted(
        p.relative_to(node_runner.root).as_posix() for p in node_runner.root.rglob("*") if p.is_file()
    )
    assert top == sorted(
        [
            f"opt/slurmpod/lifecycle/{snap.hex}/lib/helper.txt",
            f"opt/slurmpod/lifecycle/{snap.hex}/on_create.sh",
            f"opt/slurmpod/lifecycle/{snap.hex}/provisioning_parameters.json",
            "opt/ml/config/resource_config.json",
            "var/log/provision/provisioning.log",
        ]
    )


def test_failure_exit_code_tail_and_message(node_runner: LocalDirRunner, make_snapshot) -> None:
    script = "".join(f"echo line{i}\n" for i in range(30)) + "echo 'fatal: disk not found' >&2\nexit 3\n"
    snap = make_snapshot({"on_create.sh": script})
    result = run_lifecycle_script(node_runner, snap, "./on_create.sh")
    assert result.exit_code == 3 and not result.ok
    lines = result.log_tail.splitlines()
    assert len(lines) == 20
    assert lines[-1] == "fatal: disk not found"
    assert lines[0] == "line11"
    message = format_failure("on_create.sh", result)
    assert message.startswith(
        f"Lifecycle script on_create.sh failed with exit code 3 (sha256:{snap.hex[:12]}…): "
    )
    assert message.endswith("line29\nfatal: disk not found")
    assert "line19" not in message  # only the last lines


def test_tail_covers_only_this_run(node_runner: LocalDirRunner, make_snapshot) -> None:
    first = make_snapshot({"a.sh": "echo first-run\n"})
    second = make_snapshot({"b.sh": "echo second-run\n"})
    run_lifecycle_script(node_runner, first, "a.sh")
    result = run_lifecycle_script(node_runner, second, "b.sh")
    assert result.log_tail == "second-run"
    log = node_path(node_runner, DEFAULT_LOG_PATH).read_text()
    assert "first-run" in log and "second-run" in log


def test_rerun_is_idempotent(node_runner: LocalDirRunner, make_snapshot) -> None:
    snap = make_snapshot({"on_create.sh": "touch created-by-script\necho ok\n"})
    assert run_lifecycle_script(node_runner, snap, "on_create.sh").exit_code == 0
    assert run_lifecycle_script(node_runner, snap, "on_create.sh").exit_code == 0
    workdir = node_path(node_runner, f"{DEFAULT_NODE_DIR}/{snap.hex}")
    assert sorted(p.name for p in workdir.iterdir()) == ["created-by-script", "on_create.sh"]


def test_executable_with_shebang_runs_directly(node_runner: LocalDirRunner, make_snapshot) -> None:
    snap = make_snapshot(
        {"init.py": "#!/usr/bin/env python3\nimport sys\nprint('python', sys.version_info[0])\n"},
        executable=["init.py"],
    )
    result = run_lifecycle_script(node_runner, snap, "init.py")
    assert (result.exit_code, result.log_tail) == (0, "python 3")
    assert node_runner.calls[-1][-1] == "./init.py"


def test_non_executable_runs_with_bash(node_runner: LocalDirRunner, make_snapshot) -> None:
    snap = make_snapshot({"s.sh": "echo $BASH_VERSION | cut -c1\n"})
    result = run_lifecycle_script(node_runner, snap, "s.sh")
    assert result.exit_code == 0 and result.log_tail.isdigit()
    assert node_runner.calls[-1][-2:] == ["bash", "s.sh"]


def test_timeout(node_runner: LocalDirRunner, make_snapshot) -> None:
    snap = make_snapshot({"slow.sh": "echo starting\nsleep 30\necho never\n"})
    result = run_lifecycle_script(node_runner, snap, "slow.sh", timeout=1)
    assert result.exit_code == 124 and result.timed_out
    assert result.log_tail == "starting"
    assert "timed out (exit code 124)" in format_failure("slow.sh", result)
    assert "timed out after 1 seconds" in node_path(node_runner, DEFAULT_LOG_PATH).read_text()


@pytest.mark.parametrize("entry", ["../on_create.sh", "/etc/passwd", "missing.sh", "lib", ""])
def test_bad_entry_points(node_runner: LocalDirRunner, make_snapshot, entry: str) -> None:
    snap = make_snapshot({"on_create.sh": "echo\n", "lib/x.sh": "echo\n"})
    with pytest.raises(LifecycleSourceError):
        run_lifecycle_script(node_runner, snap, entry)
    assert node_runner.calls == []  # rejected before touching the node
    assert resolve_entry_point(snap, "./lib//x.sh") == "lib/x.sh"


def test_user_provisioning_parameters_win(node_runner: LocalDirRunner, make_snapshot) -> None:
    snap = make_snapshot(
        {"on_create.sh": "cat provisioning_parameters.json\n", "provisioning_parameters.json": "user"}
    )
    result = run_lifecycle_script(
        node_runner, snap, "on_create.sh", extra_files={"provisioning_parameters.json": b"generated"}
    )
    assert result.log_tail == "user"


def test_copy_failure_raises(make_snapshot, tmp_path: Path) -> None:
    class BrokenTar(LocalDirRunner):
        def run(self, argv, **kw):  # type: ignore[override]
            if argv[0] == "tar":
                from slurmpod.providers.base import CommandResult

                return CommandResult(2, "", "tar: no space left on device")
            return super().run(argv, **kw)

    (tmp_path / "n").mkdir()
    snap = make_snapshot({"a.sh": "echo\n"})
    with pytest.raises(LifecycleRunError, match="no space left"):
        run_lifecycle_script(BrokenTar(tmp_path / "n"), snap, "a.sh")


def test_format_failure_without_output() -> None:
    result = ScriptResult(exit_code=1, log_tail="", digest="sha256:" + "ab" * 32)
    assert (
        format_failure("x.sh", result)
        == "Lifecycle script x.sh failed with exit code 1 (sha256:abababababab…) with no output."
    )


def test_format_failure_caps_length() -> None:
    result = ScriptResult(
        exit_code=2, log_tail="\n".join("y" * 500 for _ in range(10)), digest="sha256:" + "c" * 64
    )
    assert len(format_failure("x.sh", result, max_chars=1000)) <= 1000
