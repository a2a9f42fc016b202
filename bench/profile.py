"""``python -m bench.profile``: where one seed-cluster creation spends its time inside slurmpod.

Runs the real server in this process (same settings as ``slurmpod server --provider local``, default
reconcile interval, uvicorn on a free port), wraps ``SlurmRuntime.boot_step`` and ``LocalRunner.run``
with timers (no slurmpod code is changed), creates the seed cluster through boto3 and prints, per node,
when each boot phase started and ended (seconds after CreateCluster) and how many in-node commands it
ran and how long they took; the accounting host's bring-up (``AccountingService._ensure``: launch, munge,
MariaDB, slurmdbd; in its own thread, in parallel with the controller) is one more row. Cleans up like the
benchmark.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.api_run import POLL, delete_and_wait, seed_groups
from bench.server import free_port


@dataclass
class PhaseTiming:
    node: str
    group: str
    phase: str
    start: float
    end: float = 0.0
    commands: int = 0
    command_seconds: float = 0.0
    slowest: list[tuple[float, str]] = field(default_factory=list)
    every: list[tuple[float, float, str]] = field(default_factory=list)  # (start, seconds, argv) of each command


class Recorder:
    def __init__(self) -> None:
        self.t0 = 0.0
        self.rows: list[PhaseTiming] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def current(self) -> PhaseTiming | None:
        return getattr(self._local, "row", None)

    @contextmanager
    def phase(self, node: str, group: str, phase: str) -> Iterator[None]:
        row = PhaseTiming(node, group, phase, time.monotonic() - self.t0)
        with self._lock:
            self.rows.append(row)
        outer = self.current()
        self._local.row = row
        try:
            yield
        finally:
            row.end = time.monotonic() - self.t0
            self._local.row = outer


def _instrument(rec: Recorder) -> None:
    from slurmpod.providers.local.runner import LocalRunner
    from slurmpod.reconciler.accounting import AccountingService
    from slurmpod.reconciler.slurm_runtime import SlurmRuntime

    boot_step = SlurmRuntime.boot_step
    run = LocalRunner.run
    ensure = AccountingService._ensure

    def timed_ensure(self: Any, cluster_id: str, *args: Any) -> Any:
        with rec.phase(self.instance_id(cluster_id), "accounting", "accounting host"):
            return ensure(self, cluster_id, *args)

    def timed_boot_step(self: Any, cluster: Any, node: Any, phase: str, nodes: Any) -> Any:
        with rec.phase(node.instance_id, node.group, phase):
            return boot_step(self, cluster, node, phase, nodes)

    def timed_run(self: Any, argv: Any, **kw: Any) -> Any:
        t = time.monotonic()
        try:
            return run(self, argv, **kw)
        finally:
            row = rec.current()
            if row is not None:
                dt = time.monotonic() - t
                row.commands += 1
                row.command_seconds += dt
                row.slowest = sorted([*row.slowest, (dt, " ".join(argv)[:60])], reverse=True)[:2]
                row.every.append((t - rec.t0, dt, " ".join(argv)))

    SlurmRuntime.boot_step = timed_boot_step  # type: ignore[method-assign]
    AccountingService._ensure = timed_ensure  # type: ignore[method-assign]
    LocalRunner.run = timed_run  # type: ignore[method-assign]


def _register(root: Path, image: str) -> str:
    """Adds an image of the host-wide image store (``default``: the one install.sh built) to ``root``."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "register", "--state-dir", str(root),
                          image], capture_output=True, text=True, timeout=120, check=False)
    if res.returncode != 0:
        raise SystemExit(f"images register {image}: {res.stderr.strip()}")
    return res.stdout.split()[1]  # "registered ami-… release …"


def _unit_times(runner: Any, units: tuple[str, ...], t0: float) -> str:
    """When each unit of a systemd node started and became active, in seconds after CreateCluster (a node's
    CLOCK_MONOTONIC is the host's)."""
    props = ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic")
    res = runner.run(["systemctl", "show", *(f"-p{p}" for p in ("Id", *props)), *units], timeout=30)
    rows = []
    for block in res.stdout.strip().split("\n\n"):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        at = [int(kv.get(p) or 0) / 1e6 - t0 for p in props]
        rows.append(f"{kv.get('Id', '?')} started {at[0]:.2f} active {at[1]:.2f}")
    res = runner.run(["systemctl", "show", "-pUserspaceTimestampMonotonic", "-pFinishTimestampMonotonic"], timeout=30)
    kv = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    boot = [int(kv.get(p) or 0) / 1e6 - t0 for p in ("UserspaceTimestampMonotonic", "FinishTimestampMonotonic")]
    return f"systemd started {boot[0]:.2f}, boot finished {boot[1]:.2f}; " + "; ".join(rows)


def _daemon_logs(server: Any, client: Any, t0: float) -> str:
    """slurmctld's log on the controller and slurmdbd's on the accounting host (timestamps show where the
    controller's first start waits), and when their units started."""
    from slurmpod.slurm.accounting import accounting_instance_id

    provider = server.runtime.provider
    cid = client.describe_cluster(ClusterName="bench-profile")["ClusterArn"].rsplit("/", 1)[-1]
    out = []
    nodes = client.list_cluster_nodes(ClusterName="bench-profile")["ClusterNodeSummaries"]
    ctl = next(n["InstanceId"] for n in nodes if n["InstanceGroupName"] == "controller-group")
    computes = [n["InstanceId"] for n in nodes if n["InstanceGroupName"] != "controller-group"]
    for iid, units in ((accounting_instance_id(cid), ("munge", "mariadb", "slurmdbd")), (ctl, ("munge", "slurmctld")),
                       *((c, ("slurmd",)) for c in computes)):
        try:
            out.append(f"== {iid} units: {_unit_times(provider.runner(cid, iid), units, t0)}")
        except Exception as exc:  # noqa: BLE001 - a node without systemd, or gone
            out.append(f"== {iid} units: {exc}")
    try:
        res = provider.runner(cid, accounting_instance_id(cid)).run(
            ["systemd-analyze", "critical-chain", "--no-pager", "slurmdbd.service"], timeout=30)
        out.append(f"== accounting host's critical chain\n{res.stdout}{res.stderr}")
    except Exception as exc:  # noqa: BLE001
        out.append(f"== accounting host's critical chain: {exc}")
    for iid, path in ((accounting_instance_id(cid), "/var/log/slurm/slurmdbd.log"),
                      (ctl, "/var/log/slurm/slurmctld.log"), *((c, "/var/log/slurm/slurmd.log") for c in computes)):
        try:
            res = provider.runner(cid, iid).run(["cat", path], timeout=30)
        except Exception as exc:  # no accounting host (--accounting none), a node already gone
            out.append(f"== {iid} {path}: {exc}")
            continue
        out.append(f"== {iid} {path}\n{res.stdout}{res.stderr}")
    return "\n".join(out)


def profile_once(workdir: Path | None = None, *, image: str | None = None, logs: bool = False,
                 accounting: str = "local") -> Recorder:
    import uvicorn

    from bench.server import BenchServer
    from slurmpod.providers.local.cleanup import cleanup
    from slurmpod.server import build_server
    from slurmpod.settings import Settings

    rec = Recorder()
    _instrument(rec)
    root = Path(tempfile.mkdtemp(prefix="slurmpod-profile-", dir=workdir))
    image_id = _register(root, image) if image else None
    port = free_port()
    settings = Settings(state_dir=root, port=port, provider="local", accounting=accounting)
    try:
        server = build_server(settings)
    except BaseException:  # e.g. no default image: nothing was started, the state dir goes
        shutil.rmtree(root, ignore_errors=True)
        raise
    server.start()
    uv = uvicorn.Server(uvicorn.Config(server.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    client = BenchServer(root, port).client()
    try:
        deadline = time.monotonic() + 20
        while not uv.started and time.monotonic() < deadline:
            time.sleep(0.02)
        rec.t0 = time.monotonic()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        groups = seed_groups(2)
        for g in groups:
            if image_id:
                g["ImageId"] = image_id
        client.create_cluster(ClusterName="bench-profile", InstanceGroups=groups)
        deadline = time.monotonic() + 300
        while client.describe_cluster(ClusterName="bench-profile")["ClusterStatus"] not in ("InService", "Failed"):
            if time.monotonic() > deadline:
                break
            time.sleep(POLL)
        d = client.describe_cluster(ClusterName="bench-profile")
        print(f"{d['ClusterStatus']} after {time.monotonic() - rec.t0:.2f}s {d.get('FailureMessage', '')}")
        print(_node_cpu(cpu0))
        if logs and d["ClusterStatus"] != "Failed":
            print(_daemon_logs(server, client, rec.t0))
    finally:
        try:
            delete_and_wait(client, "bench-profile")
        finally:
            uv.should_exit = True
            thread.join(timeout=10)
            server.stop()
            cleanup(root)
            shutil.rmtree(root, ignore_errors=True)
    return rec


def _node_cpu(before: resource.struct_rusage) -> str:
    """CPU seconds spent so far by each node (its cgroup: systemd and everything it started) and by this process
    (server, reconciler, holders' setup) since CreateCluster: what the 2 cores were busy with."""
    from slurmpod.providers.local.holder import node_cgroup

    parts = []
    base = node_cgroup("x")
    nodes = sorted(p for p in base.parent.iterdir() if p.is_dir()) if base is not None and base.parent.is_dir() else []
    for cg in nodes:
        stat = (cg / "cpu.stat").read_text() if (cg / "cpu.stat").exists() else ""
        usec = next((int(line.split()[1]) for line in stat.splitlines() if line.startswith("usage_usec")), 0)
        parts.append(f"{cg.name} {usec / 1e6:.2f}")
    now = resource.getrusage(resource.RUSAGE_SELF)
    me = now.ru_utime + now.ru_stime - before.ru_utime - before.ru_stime
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (f"CPU s by then: {', '.join(parts)}; this process {me:.2f} "
            f"(+ ended children {kids.ru_utime + kids.ru_stime:.2f} in all)")


def render(rec: Recorder, *, commands: bool = False) -> str:
    lines = [f"{'node':<22} {'group':<17} {'phase':<17} {'start':>6} {'end':>6} {'dur':>6} {'cmds':>4} "
             f"{'cmd s':>6}  slowest commands"]
    for r in sorted(rec.rows, key=lambda r: (r.start, r.node)):
        slow = "; ".join(f"{dt:.2f} {cmd}" for dt, cmd in r.slowest)
        lines.append(f"{r.node:<22} {r.group:<17} {r.phase:<17} {r.start:6.2f} {r.end:6.2f} {r.end - r.start:6.2f} "
                     f"{r.commands:4d} {r.command_seconds:6.2f}  {slow}")
        if commands:
            lines.extend(f"{'':<22} {start:6.2f} {dt:6.3f}  {cmd[:150]}" for start, dt, cmd in r.every)
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--image", default=None, metavar="AMI|default",
                   help="name this image of the image store as every group's ImageId (default: none, so the "
                        "nodes boot the server's default node image, which is the store's default root filesystem "
                        "too; `builtin` is not an image of the store: use `slurmpod server --node-image builtin`)")
    p.add_argument("--logs", action="store_true", help="print slurmdbd's and slurmctld's logs before teardown")
    p.add_argument("--accounting", choices=("local", "none"), default="local")
    p.add_argument("--commands", action="store_true", help="list every in-node command of each phase (start, seconds)")
    args = p.parse_args()
    print(render(profile_once(args.workdir, image=args.image, logs=args.logs, accounting=args.accounting),
                 commands=args.commands))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
