"""The cluster's container registry (``slurmpod.providers.local.registry``): node files and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmpod.providers.local.registry import ContainerRegistry, RegistryError, node_registry_files


def test_node_files_point_podman_docker_and_the_helper_at_the_bridge() -> None:
    files = node_registry_files("10.231.7.1")
    assert files["/etc/slurmpod/registry"] == "10.231.7.1:5000\n"
    conf = files["/etc/containers/registries.conf.d/50-slurmpod.conf"]
    assert 'unqualified-search-registries = ["10.231.7.1:5000"]' in conf and "insecure = true" in conf
    daemon = json.loads(files["/etc/docker/daemon.json"])
    assert daemon["insecure-registries"] == ["10.231.7.1:5000"] and daemon["data-root"] == "/var/lib/docker"
    assert node_registry_files("10.231.7.1") == files  # pure


@pytest.mark.parametrize("bad", ["0.0.0.0", "127.0.0.1", "not-an-ip"])
def test_never_on_a_wildcard_or_loopback(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        node_registry_files(bad)
    with pytest.raises(ValueError):
        ContainerRegistry(tmp_path).ensure(bad)


def test_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    reg = ContainerRegistry(tmp_path, binary=str(tmp_path / "no-docker-registry"))
    with pytest.raises(RegistryError, match="apt-get install docker-registry"):
        reg.ensure("10.231.7.1")
    assert reg.status() == [] and reg.address() is None
    reg.close()
    reg.reset()
    reg.resume()  # nothing recorded: nothing to do


def test_a_starting_registry_is_recorded_before_it_listens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server killed while its registry process was starting left one nobody knew (the record was written once
    it listened): the record names the process from its start, and a failed start leaves no entry."""
    import os
    import signal
    import threading
    import time

    from slurmpod.providers.local import registry

    fake = tmp_path / "fake-registry"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setattr(registry, "START_TIMEOUT", 3.0)
    monkeypatch.setattr(registry, "_listening", lambda ip, port: False)
    reg = ContainerRegistry(tmp_path / "reg", binary=str(fake))
    seen: list[list[object]] = []
    errors: list[Exception] = []

    def start() -> None:
        try:
            with reg._locked() as rec:
                reg._start(rec, "10.231.5.1")
        except RegistryError as exc:
            errors.append(exc)

    record = reg.dir / "registry.json"
    t = threading.Thread(target=start)
    t.start()
    try:
        deadline = time.monotonic() + 2
        while not seen and time.monotonic() < deadline:
            seen = list(json.loads(record.read_text())["procs"].values()) if record.exists() else []
        assert seen and registry._proc_start(int(seen[0][0])) == seen[0][1]  # the live child, while it starts
    finally:
        t.join(10)
        for pid, _ in seen:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert errors and "did not start" in str(errors[0])
    assert json.loads(record.read_text())["procs"] == {}


def test_a_registry_nobody_recorded_is_found_adopted_and_stopped(tmp_path: Path) -> None:
    """A server killed between starting its registry and writing registry.json: the process is found by its
    command line (this state dir's configuration), reported by ``status``, adopted and stopped by ``close``."""
    import subprocess
    import time

    from slurmpod.providers.local import registry

    fake = tmp_path / "fake-registry"
    fake.write_text("#!/bin/sh\nwhile :; do sleep 0.1; done\n")
    fake.chmod(0o755)
    reg = ContainerRegistry(tmp_path / "reg", binary=str(fake))
    other = ContainerRegistry(tmp_path / "other", binary=str(fake))
    for r in (reg, other):  # as _start leaves them: the configuration written, then the process started
        (r.dir / "conf").mkdir(parents=True)
        (r.dir / "conf" / "10.231.5.1.yml").write_text("")
    procs = [subprocess.Popen([str(fake), "serve", str(r.dir / "conf" / "10.231.5.1.yml")])
             for r in (reg, other)]
    try:
        deadline = time.monotonic() + 5
        while any(registry._proc_start(p.pid) is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not (reg.dir / "registry.json").exists()  # nothing recorded
        assert reg.status() == [("10.231.5.1", procs[0].pid)]
        reg.close()
        assert procs[0].wait(10) is not None and reg.status() == []
        assert procs[1].poll() is None  # another state dir's process is never touched
        assert other.status() == [("10.231.5.1", procs[1].pid)]
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
