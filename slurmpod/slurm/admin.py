"""Admin commands run inside a controller node (usually the primary): node state (``scontrol``/``sinfo`` JSON),
drain/down/resume, the jobs on a node, deleting a node, and waiting for nodes to join or go idle.

Like ``control``, every command is an argv list with a timeout run inside the node through its ``CommandRunner``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from slurmpod.providers.base import CommandResult, CommandRunner
from slurmpod.slurm.control import REASON_PREFIX, Clock, Sleep, SlurmError, _run, _wait, ping
from slurmpod.slurm.state import SlurmNode, parse_sinfo_json


def _job_order(job_id: str) -> tuple[int, str]:
    head = job_id.split("_")[0]
    return (int(head) if head.isdigit() else 0, job_id)


#: per-node JSON on every Slurm release slurmpod runs (see ``SlurmControl.nodes``)
NODES_JSON = "scontrol show nodes --json 2>/dev/null || exec sinfo --json"
#: the same for the nodes of a comma list (``$1``): a joining node's wait reads its own record, not the whole
#: cluster's (50 nodes joining at once each polled every node's JSON); 22.05's sinfo still sends them all
SOME_NODES_JSON = 'scontrol show node "$1" --json 2>/dev/null || exec sinfo --json'


class SlurmControl:
    """Admin commands run inside a controller node (usually the primary)."""

    def __init__(
        self, runner: CommandRunner, sleep: Sleep = time.sleep, clock: Clock = time.monotonic
    ) -> None:
        self.runner = runner
        self._sleep = sleep
        self._clock = clock

    def _scontrol(self, *args: str) -> CommandResult:
        return _run(self.runner, ["scontrol", *args])

    def ping(self) -> dict[str, bool]:
        return ping(self.runner)

    def nodes(self, names: Iterable[str] | None = None) -> list[SlurmNode]:
        """Every node Slurm knows, or only those of ``names`` (asked for by name where Slurm can)."""
        # Slurm >= 23.02: scontrol's per-node JSON (24.11's ``sinfo --json`` groups nodes by state and partition);
        # 22.05's scontrol has no --json and refuses it at once: then sinfo's per-node JSON (openapi v0.0.38)
        wanted = None if names is None else set(names)
        if wanted is not None and not wanted:
            return []
        argv = ["sh", "-c", NODES_JSON] if wanted is None else \
            ["sh", "-c", SOME_NODES_JSON, "sh", ",".join(sorted(wanted))]
        r = _run(self.runner, argv)
        if r.returncode != 0:
            raise SlurmError(f"scontrol/sinfo --json failed: {(r.stderr or r.stdout).strip()}")
        parsed = parse_sinfo_json(r.stdout)
        return parsed if wanted is None else [n for n in parsed if n.name in wanted]

    def node(self, name: str) -> SlurmNode | None:
        return next(iter(self.nodes([name])), None)

    def _update(self, node: str, *params: str) -> None:
        r = self._scontrol("update", f"nodename={node}", *params)
        if r.returncode != 0:
            raise SlurmError(
                f"scontrol update nodename={node} {' '.join(params)} failed: {(r.stderr or r.stdout).strip()}"
            )

    def drain(self, node: str, reason: str) -> None:
        """Drain with a ``slurmpod: `` reason (running jobs finish, nothing new starts)."""
        text = reason if reason.startswith(REASON_PREFIX) else REASON_PREFIX + reason
        self._update(node, "state=drain", f"reason={text}")

    def down(self, node: str, reason: str) -> None:
        text = reason if reason.startswith(REASON_PREFIX) else REASON_PREFIX + reason
        self._update(node, "state=down", f"reason={text}")

    def resume(self, node: str) -> None:
        """Clears DRAIN/DOWN (DRAIN survives re-registration, so maintenance ends with this)."""
        self._update(node, "state=resume")

    def jobs_on(self, node: str) -> list[str]:
        """Ids of the jobs (running, completing, suspended) with a part on ``node``."""
        r = _run(self.runner, ["squeue", "-h", "-w", node, "-t", "RUNNING,COMPLETING,SUSPENDED", "-o", "%i"])
        if r.returncode != 0:
            raise SlurmError(f"squeue -w {node} failed: {(r.stderr or r.stdout).strip()}")
        return sorted({line.strip() for line in r.stdout.splitlines() if line.strip()}, key=_job_order)

    def delete_node(self, node: str) -> bool:
        """``scontrol delete nodename=``; True if deleted, False if Slurm did not know it.

        Slurm refuses a busy node (``SlurmError``): drain and wait first.
        """
        r = self._scontrol("delete", f"nodename={node}")
        if r.returncode == 0:
            return True
        msg = (r.stderr or r.stdout).strip()
        if "invalid node name" in msg.lower():
            return False
        raise SlurmError(f"scontrol delete nodename={node} failed: {msg}")

    def _wait_until(self, names: Iterable[str], timeout: float, ok: Callable[[SlurmNode], bool]) -> set[str]:
        """Polls until ``ok`` holds for every named node or ``timeout`` passes; returns the names it holds for."""
        wanted = set(names)
        good: set[str] = set()

        def done() -> bool:
            nonlocal good
            try:
                current = self.nodes(wanted)
            except SlurmError:
                return False
            good = {n.name for n in current if n.name in wanted and ok(n)}
            return good == wanted

        _wait(done, timeout, self._sleep, self._clock)
        return good

    def wait_for_nodes(self, names: Iterable[str], timeout: float) -> set[str]:
        """Polls until every name is joined (registered, responding, usable); returns the joined subset."""
        return self._wait_until(names, timeout, SlurmNode.is_joined)

    def wait_for_idle(self, names: Iterable[str], timeout: float) -> set[str]:
        """Like ``wait_for_nodes`` but for nodes with no jobs (a drain is complete when they are idle)."""
        return self._wait_until(names, timeout, lambda n: not n.has_jobs())
