"""The ssh provider's accelerator check at launch: a host whose /dev/nvidia<N> (or /dev/neuron<N>) count is not its
instance type's is refused (released, set aside, the error recorded) -- through ``SshProvider.launch`` on fake
sessions that answer the host-facts script like a real host would."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmpod.domain.catalog import accelerator_devices, instance_type_info
from slurmpod.providers.base import CommandResult, InstanceRequest, TemporaryProviderError
from slurmpod.providers.ssh import remote
from slurmpod.providers.ssh.pool import HostPool, HostRecord
from slurmpod.providers.ssh.provider import SshProvider
from slurmpod.providers.ssh.session import Target


class FakeSessions:
    """A host with the given device files; every other command succeeds."""

    def __init__(self, nvidia: Sequence[str] = (), neuron: Sequence[str] = ()) -> None:
        self.nvidia, self.neuron = list(nvidia), list(neuron)
        self.commands: list[list[str]] = []

    def pin(self, t: Target, timeout: float = 20.0) -> tuple[str, str]:
        return "ssh-ed25519 AAAAfake", "10.9.0.5"

    def forget(self, name: str) -> None:
        pass

    def run(self, t: Target, argv: Sequence[str], *, timeout: float, input: bytes | None = None,
            env: object = None, cwd: str | None = None) -> CommandResult:
        self.commands.append(list(argv))
        if list(argv) == ["bash", "-c", remote.FACTS]:
            import time
            facts = {"os": "Debian GNU/Linux 12 (bookworm)", "hostname": "gpu1", "time": f"{time.time():.3f}",
                     "missing": "", "ports": "", "daemons": "", "ours": "", "apt": "yes",
                     "nvidia": " ".join(self.nvidia), "neuron": " ".join(self.neuron)}
            return CommandResult(0, "".join(f"{k}={v}\n" for k, v in facts.items()), "")
        return CommandResult(0, "", "")


def _provider(tmp_path: Path, itype: str, sessions: FakeSessions) -> SshProvider:
    p = SshProvider(tmp_path, sessions)  # type: ignore[arg-type]
    p.pool.add(HostRecord(name="root@gpu1:22", pool="gpu", instance_type=itype, user="root", host="gpu1", port=22,
                          key="/k"))
    return p


def _request(itype: str) -> InstanceRequest:
    return InstanceRequest(cluster_id="c1", instance_id="i-0abc", group="gpu-group", instance_type=itype,
                           image_id="host", image_root="/", devices=accelerator_devices(instance_type_info(itype)))


def test_host_with_the_right_gpu_count_is_used(tmp_path: Path) -> None:
    s = FakeSessions(nvidia=[f"/dev/nvidia{i}" for i in range(8)])
    inst = _provider(tmp_path, "ml.p5.48xlarge", s).launch(_request("ml.p5.48xlarge"))
    assert inst.ip == "10.9.0.5" and inst.hostname == "gpu1"
    assert any(c[0] == "install" for c in s.commands)  # the host was prepared


@pytest.mark.parametrize("found", [[], [f"/dev/nvidia{i}" for i in range(7)]])
def test_host_with_another_gpu_count_is_refused(tmp_path: Path, found: list[str]) -> None:
    s = FakeSessions(nvidia=found)
    p = _provider(tmp_path, "ml.p5.48xlarge", s)
    with pytest.raises(TemporaryProviderError) as err:
        p.launch(_request("ml.p5.48xlarge"))
    msg = str(err.value)
    assert f"has {len(found)} NVIDIA GPU device" in msg and "ml.p5.48xlarge has 8" in msg, msg
    rec = HostPool(tmp_path).find("root@gpu1:22")
    assert rec is not None and rec.free and rec.quarantine_until > 0 and "NVIDIA GPU" in rec.last_error
    # refused before anything was written to the host
    assert not any(c[0] == "install" or "slurmpod-track" in c for c in s.commands)


def test_cpu_type_on_a_gpu_host_and_trainium(tmp_path: Path) -> None:
    with pytest.raises(TemporaryProviderError, match="has 2 NVIDIA GPU devices .* ml.c5.xlarge has 0"):
        _provider(tmp_path / "a", "ml.c5.xlarge", FakeSessions(nvidia=["/dev/nvidia0", "/dev/nvidia1"])).launch(
            _request("ml.c5.xlarge"))
    trn = FakeSessions(neuron=[f"/dev/neuron{i}" for i in range(16)])
    assert _provider(tmp_path / "b", "ml.trn2.48xlarge", trn).launch(_request("ml.trn2.48xlarge")).ip
    with pytest.raises(TemporaryProviderError, match="has 1 Trainium"):
        _provider(tmp_path / "c", "ml.trn2.48xlarge", FakeSessions(neuron=["/dev/neuron0"])).launch(
            _request("ml.trn2.48xlarge"))


def test_facts_script_lists_character_devices_only() -> None:
    """The host-facts script itself, in a private mount namespace whose /dev holds nvidia0..2 (character devices),
    nvidiactl, a regular file nvidia3 and neuron0."""
    import os
    import shutil
    import subprocess

    from slurmpod.providers.ssh.remote import parse_facts

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare")
    setup = ("mount -t tmpfs none /dev && for d in nvidia0 nvidia1 nvidia2 nvidiactl neuron0; do "
             "mknod /dev/$d c 1 3; done && touch /dev/nvidia3 && exec bash -c \"$0\"")
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", setup, remote.FACTS],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    facts = parse_facts(r.stdout)
    assert facts["nvidia"].split() == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
    assert facts["neuron"].split() == ["/dev/neuron0"]
