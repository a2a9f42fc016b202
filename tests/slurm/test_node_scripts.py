"""The in-node shell scripts that replaced several commands each (``units.START``, ``control.LINK_OPT_SLURM_CONF``),
run by a real ``sh`` against the real paths they name, in a private mount namespace whose ``/etc/systemd/system``,
``/etc/slurm`` and ``/opt`` are fresh tmpfs (nothing of this host is touched). ``systemctl`` is a stand-in that
logs its calls and keeps each unit's state in a file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from slurmpod.slurm import control, units

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a private mount namespace)")

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$LOG"
case "$1" in
  is-active) [ "$(cat "$STATE/$3" 2>/dev/null)" = active ] ;;
  reset-failed) exit 0 ;;
  start|restart) [ "$(cat "$STATE/fail" 2>/dev/null)" = "$1" ] && { echo "Job for $2 failed" >&2; exit 1; }
                 echo active > "$STATE/$2" ;;
esac
"""


def _in_namespace(tmp_path: Path, setup: str, argv: list[str]) -> tuple[subprocess.CompletedProcess[str], str]:
    """Runs ``setup`` then ``argv`` (sh quoting done by the caller's list) with fresh tmpfs over the paths."""
    bin_dir, state, log = tmp_path / "bin", tmp_path / "state", tmp_path / "log"
    for d in (bin_dir, state):
        d.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    log.touch()
    outer = ("set -e; for d in /etc/systemd/system /etc/slurm /opt; do mkdir -p $d; mount -t tmpfs t $d; done; "
             "mkdir -p /etc/systemd/system/multi-user.target.wants; " + setup + '; exec "$@"')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STATE": str(state), "LOG": str(log)}
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", outer, "outer", *argv],
                       capture_output=True, text=True, timeout=30, env=env)
    return r, log.read_text()


def _start(unit: str, mode: str, restart: str = "keep") -> list[str]:
    return ["sh", "-c", units.START + "\nls -l /etc/systemd/system/multi-user.target.wants/ | tail -n +2",
            "sh", unit, mode, restart]


def test_start_enables_and_starts_a_stopped_unit(tmp_path: Path) -> None:
    r, log = _in_namespace(tmp_path, "touch /etc/systemd/system/slurmd.service", _start("slurmd", "enable"))
    assert r.returncode == 0, r.stderr
    assert log.split("\n")[:3] == ["is-active --quiet slurmd", "reset-failed slurmd", "start slurmd"]
    assert "slurmd.service -> /etc/systemd/system/slurmd.service" in r.stdout
    # a unit only in /lib gets its link there, as `systemctl enable` would
    r, _ = _in_namespace(tmp_path, "true", _start("munge", "enable"))
    assert "munge.service -> /lib/systemd/system/munge.service" in r.stdout


def test_start_leaves_an_active_unit_alone_unless_asked_to_restart(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state/slurmd").write_text("active")
    r, log = _in_namespace(tmp_path, "true", _start("slurmd", "enable"))
    assert r.returncode == 0 and log == "is-active --quiet slurmd\n"
    (tmp_path / "log").unlink()
    r, log = _in_namespace(tmp_path, "true", _start("slurmd", "enable", "restart"))
    assert r.returncode == 0 and log == "is-active --quiet slurmd\nrestart slurmd\n"


def test_start_disabled_removes_the_link_first(tmp_path: Path) -> None:
    link = "ln -s /etc/systemd/system/slurmctld.service /etc/systemd/system/multi-user.target.wants/slurmctld.service"
    r, log = _in_namespace(tmp_path, link, _start("slurmctld", "disable"))
    assert r.returncode == 0 and "slurmctld.service" not in r.stdout
    assert "start slurmctld" in log


def test_enable_links_the_unit_as_systemctl_enable_would(tmp_path: Path) -> None:
    """``units.ENABLE`` (the MariaDB and munge units' enable): one command, the same link as START's."""
    ls = "\nls -l /etc/systemd/system/multi-user.target.wants/ | tail -n +2"
    r, log = _in_namespace(tmp_path, "true", ["sh", "-c", units.ENABLE + ls, "sh", "mariadb"])
    assert r.returncode == 0 and log == "", r.stderr
    assert "mariadb.service -> /lib/systemd/system/mariadb.service" in r.stdout
    r, _ = _in_namespace(tmp_path, "touch /etc/systemd/system/munge.service",
                         ["sh", "-c", units.ENABLE + ls, "sh", "munge"])
    assert "munge.service -> /etc/systemd/system/munge.service" in r.stdout


def test_start_failures_have_their_own_exit_codes(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state/fail").write_text("start")
    r, _ = _in_namespace(tmp_path, "true", ["sh", "-c", units.START, "sh", "slurmd", "enable", "keep"])
    assert r.returncode == 4 and "Job for slurmd failed" in r.stderr
    (tmp_path / "state/fail").write_text("restart")
    (tmp_path / "state/slurmd").write_text("active")
    r, _ = _in_namespace(tmp_path, "true", ["sh", "-c", units.START, "sh", "slurmd", "enable", "restart"])
    assert r.returncode == 5
    (tmp_path / "state/slurmd").write_text("inactive")
    r, _ = _in_namespace(tmp_path, "mount -t tmpfs -o ro t /etc/systemd/system/multi-user.target.wants",
                         ["sh", "-c", units.START, "sh", "slurmd", "enable", "keep"])
    assert r.returncode == 3


def _link(tmp_path: Path, setup: str) -> str:
    # (the script ends in exec: what it made is listed after it)
    r, _ = _in_namespace(tmp_path, setup, ["sh", "-c", 'sh -c "$1" sh "$2" && ls -l /opt/slurm/etc /etc/slurm', "x",
                                           control.LINK_OPT_SLURM_CONF, "/run/slurm/conf/slurm.conf"])
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("setup", [
    "true",  # no /opt/slurm/etc yet: made, and its slurm.conf links the target
    "mkdir -p /opt/slurm/etc",  # the image's layout: /opt/slurm/etc a real directory
    "mkdir -p /opt/slurm && ln -s /etc/slurm /opt/slurm/etc",  # /opt/slurm/etc -> /etc/slurm: the link goes there
])
def test_link_opt_slurm_conf(tmp_path: Path, setup: str) -> None:
    out = _link(tmp_path, setup)
    assert "slurm.conf -> /run/slurm/conf/slurm.conf" in out, out
    if "ln -s" in setup:
        assert out.split("/etc/slurm:")[1].count("slurm.conf -> /run/slurm/conf/slurm.conf") == 1, out


def test_link_opt_slurm_conf_is_a_no_op_when_it_already_is_the_target(tmp_path: Path) -> None:
    setup = ("mkdir -p /opt/slurm/etc && touch /etc/slurm/slurm.conf && "
             "ln -s /etc/slurm/slurm.conf /opt/slurm/etc/slurm.conf")
    r, _ = _in_namespace(tmp_path, setup, ["sh", "-c", control.LINK_OPT_SLURM_CONF + "\necho not-reached", "sh",
                                           "/etc/slurm/slurm.conf"])
    assert r.returncode == 0 and "not-reached" not in r.stdout
