"""Unit tests of the ssh provider's pure parts: targets, registry, file tracking argv, remote command line."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from slurmpod.providers.ssh.pool import FOREVER, HostPool, HostRecord, PoolError, host_name, parse_target
from slurmpod.providers.ssh.remote import TRACK_AND_EXEC, tracked_argv, write_targets
from slurmpod.providers.ssh.session import remote_command


def test_parse_target() -> None:
    assert parse_target("10.0.0.5") == ("root", "10.0.0.5", 22)
    assert parse_target("admin@node-1.example:2222") == ("admin", "node-1.example", 2222)
    with pytest.raises(PoolError):
        parse_target("root@host;rm -rf /")


def _rec(name: str, itype: str = "ml.c5.xlarge", pool: str = "p") -> HostRecord:
    return HostRecord(name=name, pool=pool, instance_type=itype, user="root", host=name, port=22, key="/k")


def test_claim_order_release_and_quarantine(tmp_path: Path) -> None:
    pool = HostPool(tmp_path)
    for n in ("b", "a", "c"):
        pool.add(_rec(n))
    with pytest.raises(PoolError):
        pool.add(_rec("d", itype="ml.t3.medium"))  # one instance type per pool
    first, typed = pool.claim("c1", "i-1", "g", "ml.c5.xlarge", now=100)
    assert first is not None and first.name == "b" and len(typed) == 3  # registration order
    again, _ = pool.claim("c1", "i-1", "g", "ml.c5.xlarge", now=100)
    assert again is not None and again.name == "b"  # idempotent
    with pytest.raises(PoolError):
        pool.remove("b")  # in use
    pool.release("b", error="unreachable", quarantine=FOREVER)
    nxt, _ = pool.claim("c1", "i-2", "g", "ml.c5.xlarge")
    assert nxt is not None and nxt.name == "a"
    assert pool.find("b") is not None and pool.find("b").quarantine_until == FOREVER  # type: ignore[union-attr]
    assert HostPool(tmp_path).find("b").to_json()["quarantine_until"] is None  # type: ignore[union-attr]
    assert host_name("root", "fe80::1", 22) == "root@[fe80::1]:22"


def test_tar_batches_are_tracked_by_their_members() -> None:
    """``providers.nodefiles.write_files`` names its members in argv, so the host's manifest records them."""
    from slurmpod.providers.base import NodeFile
    from slurmpod.providers.nodefiles import write_files

    seen: list[list[str]] = []

    class Recorder:
        def run(self, argv, *, timeout, input=None, env=None, cwd=None):  # type: ignore[no-untyped-def]
            seen.append(list(argv))
            from slurmpod.providers.base import CommandResult
            return CommandResult(0, "", "")

    write_files(Recorder(), [NodeFile("/etc/munge/munge.key", b"k", 0o400, "munge")],  # type: ignore[arg-type]
                dirs=[("/root/.ssh", 0o700, "root")])
    assert write_targets(seen[0]) == ["/root/.ssh", "/etc/munge/munge.key"]
    assert tracked_argv(seen[0], "root")[:5] == ["bash", "-c", TRACK_AND_EXEC, "slurmpod-track", "2"]
    assert write_targets(["tar", "-c", "-f", "-", "/etc"]) == []  # only extraction writes


def test_write_targets_and_tracking() -> None:
    assert write_targets(["install", "-D", "-m", "0644", "/dev/stdin", "/etc/x"]) == ["/etc/x"]
    assert write_targets(["install", "-d", "-m", "0755", "-o", "slurm", "-g", "slurm", "/a", "/b"]) == ["/a", "/b"]
    assert write_targets(["install", "-m", "0600", "/dev/stdin", "/etc/m.slurmpod-tmp"]) == []
    assert write_targets(["mv", "-f", "/etc/m.slurmpod-tmp", "/etc/m"]) == ["/etc/m"]
    assert write_targets(["cat", "/etc/m"]) == []
    assert tracked_argv(["cat", "/x"], "root") == ["cat", "/x"]
    wrapped = tracked_argv(["mv", "-f", "/etc/m.slurmpod-tmp", "/etc/m"], "root")
    assert wrapped[:5] == ["bash", "-c", TRACK_AND_EXEC, "slurmpod-track", "1"]
    assert wrapped[5:] == ["/etc/m", "mv", "-f", "/etc/m.slurmpod-tmp", "/etc/m"]
    # the login key must survive: replacing root's authorized_keys becomes a merge
    merged = tracked_argv(["mv", "-f", "/root/.ssh/authorized_keys.slurmpod-tmp", "/root/.ssh/authorized_keys"],
                          "root")
    assert "slurmpod-merge" in merged and merged[-1] == "/root/.ssh/authorized_keys"


def test_remote_command_quotes_argv() -> None:
    cmd = remote_command("root", ["echo", "a b", "$(id)"], {"X": "1 2"}, "/tmp")
    parts = shlex.split(cmd)
    assert parts[:2] == ["sh", "-c"] and parts[-3:] == ["echo", "a b", "$(id)"] and "X=1 2" in parts
    assert shlex.split(remote_command("admin", ["true"]))[:3] == ["sudo", "-n", "--"]
