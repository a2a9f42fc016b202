"""Rehearsal faults in provider instances (``slurmpod faults``): what breaks, and where it is allowed.

Most faults are made inside the node by its own ``slurmpod-fault`` program (``slurmpod/node/fault.py``, a boot
file of every node), through the instance's runner; ``node-crash`` is a power loss made from outside: every
process of a local node dies at once (its namespaces' holder is killed), as when a machine loses power.

Allowed on local nodes; on an ssh host only when its pool entry has ``allow_faults`` (``slurmpod hosts add
--allow-faults``), and never ``node-crash`` there (slurmpod does not cut a real machine's power). Simulated
instances have nothing to break.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from typing import Any

from slurmpod.node.faults import KINDS
from slurmpod.providers.base import Provider, ProviderError
from slurmpod.providers.local import holder
from slurmpod.providers.local.provider import LocalProvider
from slurmpod.providers.local.state import InstanceRecord
from slurmpod.providers.ssh.routing import PooledProvider

NODE_PROGRAM = "/usr/lib/slurmpod/bin/slurmpod-fault"
TIMEOUT = 60.0


class FaultError(Exception):
    """A fault cannot be injected, cleared or listed here; one line for the user."""


def _local_of(provider: Provider, cluster_id: str, instance_id: str) -> LocalProvider | None:
    """The local provider that runs the instance, or None when an ssh host does (FaultError when neither)."""
    local: LocalProvider | None = None
    if isinstance(provider, PooledProvider):
        if provider.ssh.owns(cluster_id, instance_id):
            return None
        local = provider.local
    elif isinstance(provider, LocalProvider):
        local = provider
    if local is not None:
        if not (local.layout.instance(cluster_id, instance_id) / "meta.json").exists():
            raise FaultError(f"{instance_id} is not a node this machine runs (a simulated instance, or another state "
                             "dir's): faults are injected into local nodes and allowed ssh hosts")
        return local
    raise FaultError(f"instances of the {getattr(provider, 'name', type(provider).__name__)} provider have nothing "
                     "to break: faults are injected into local nodes and allowed ssh hosts")


def check_allowed(provider: Provider, cluster_id: str, instance_id: str, kind: str) -> None:
    if kind not in KINDS:
        raise FaultError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
    if _local_of(provider, cluster_id, instance_id) is not None:
        return
    assert isinstance(provider, PooledProvider)
    rec = provider.ssh.pool.assigned(cluster_id, instance_id)
    if rec is None or not rec.allow_faults:
        name = rec.name if rec is not None else instance_id
        raise FaultError(f"{instance_id} runs on ssh host {name}, whose pool does not allow faults (register it "
                         "with `slurmpod hosts add ... --allow-faults` to rehearse on it)")
    if kind == "node-crash":
        raise FaultError(f"{instance_id} runs on ssh host {rec.name}: slurmpod does not cut a real machine's "
                         "power (node-crash is for local nodes)")


def _node_program(provider: Provider, cluster_id: str, instance_id: str, args: Sequence[str]) -> Any:
    try:
        r = provider.runner(cluster_id, instance_id).run([NODE_PROGRAM, *args], timeout=TIMEOUT)
    except ProviderError as exc:
        raise FaultError(f"cannot reach {instance_id}: {exc}") from exc
    if r.returncode != 0:
        why = (r.stderr or r.stdout).strip().splitlines()
        if r.returncode in (126, 127):
            raise FaultError(f"{instance_id} has no {NODE_PROGRAM} (a node booted by an older slurmpod: "
                             "reboot or replace it first)")
        raise FaultError(f"{' '.join(args[:2])} failed on {instance_id}: {why[-1] if why else r.returncode}")
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise FaultError(f"{instance_id} answered {r.stdout.strip()[-200:]!r}") from exc


def power_loss(local: LocalProvider, cluster_id: str, instance_id: str) -> None:
    """Every process of the local node dies at once (its PID namespace's holder is killed)."""
    rec = InstanceRecord.load(local.layout.instance(cluster_id, instance_id) / "meta.json")
    if rec is None or rec.holder_pid <= 0 or not holder.is_running(rec.holder_pid, rec.holder_start):
        raise FaultError(f"{instance_id} is not running")
    try:
        os.kill(rec.holder_pid, signal.SIGKILL)
    except ProcessLookupError as exc:
        raise FaultError(f"{instance_id} is not running") from exc


def inject(provider: Provider, cluster_id: str, instance_id: str, kind: str, *, gpu: int = 0,
           duration: float | None = None) -> dict[str, Any]:
    check_allowed(provider, cluster_id, instance_id, kind)
    if kind == "node-crash":
        local = _local_of(provider, cluster_id, instance_id)
        assert local is not None
        power_loss(local, cluster_id, instance_id)
        return {"kind": kind}
    args = ["inject", kind, "--gpu", str(gpu)]
    if duration:
        args += ["--duration", str(duration)]
    result = _node_program(provider, cluster_id, instance_id, args)
    return result if isinstance(result, dict) else {"kind": kind}


def clear(provider: Provider, cluster_id: str, instance_id: str, kinds: Sequence[str] = ()) -> list[str]:
    _local_of(provider, cluster_id, instance_id)
    for kind in kinds:
        if kind not in KINDS:
            raise FaultError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
    result = _node_program(provider, cluster_id, instance_id, ["clear", *kinds])
    return list(result.get("cleared", [])) if isinstance(result, dict) else []


def active(provider: Provider, cluster_id: str, instance_id: str) -> dict[str, Any]:
    _local_of(provider, cluster_id, instance_id)
    result = _node_program(provider, cluster_id, instance_id, ["list"])
    return result if isinstance(result, dict) else {}
