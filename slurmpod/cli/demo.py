"""``slurmpod demo``: seed 000's cluster on real Slurm on this machine, a job on it, and how to go on.

Starts ``slurmpod server`` in the background (unless one already answers on the port), creates the cluster
through the real boto3 client, shows progress until InService, submits
``sbatch --partition=compute --wrap="hostname && sleep 5"`` on the controller, shows sinfo/squeue and the
job's output, then prints how to connect and how to tear down (``slurmpod demo --down``).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from slurmpod.security.credentials import Credential, CredentialStore

CLUSTER = "hyperpod-api-driven-cluster"
ROLE = "arn:aws:iam::123456789012:role/hyperpod-api-driven-exec-role"
ACCOUNT = "123456789012"
REGION = "us-east-1"
console = Console()


def _groups() -> list[dict[str, Any]]:
    def group(name: str, count: int, slurm: dict[str, Any]) -> dict[str, Any]:
        return {"InstanceGroupName": name, "InstanceType": "ml.t3.medium", "InstanceCount": count,
                "ThreadsPerCore": 1, "ExecutionRole": ROLE, "SlurmConfig": slurm}

    return [group("controller-group", 1, {"NodeType": "Controller"}),
            group("compute-group", 2, {"NodeType": "Compute", "PartitionNames": ["compute"]})]


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


def _credential(state: Path) -> Credential:
    """The demo's access key (account 123456789012), created in the state dir on first use."""
    return CredentialStore(state).get_or_create(ACCOUNT)


def _client(state: Path, port: int) -> Any:
    import boto3

    cred = _credential(state)
    return boto3.client("sagemaker", endpoint_url=f"http://127.0.0.1:{port}", region_name=REGION,
                        aws_access_key_id=cred.access_key_id, aws_secret_access_key=cred.secret_access_key)


def _start_server(state: Path, port: int) -> None:
    if _answers(port):
        console.print(f"[dim]using the slurmpod server already listening on 127.0.0.1:{port}[/]")
        return
    state.mkdir(parents=True, exist_ok=True)
    log = (state / "server.log").open("ab")
    proc = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "slurmpod.cli", "server", "--port", str(port), "--state-dir", str(state)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    (state / "server.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 30
    while not _answers(port):
        if proc.poll() is not None:
            tail = (state / "server.log").read_text().splitlines()[-5:]
            raise SystemExit("slurmpod: the server did not start:\n  " + "\n  ".join(tail))
        if time.monotonic() > deadline:
            raise SystemExit(f"slurmpod: the server did not answer on port {port} within 30 s")
        time.sleep(0.1)
    console.print(f"started [bold]slurmpod server[/] (pid {proc.pid}, log {state / 'server.log'})")


def _progress(client: Any) -> dict[str, Any]:
    started = time.monotonic()
    with Live(console=console, refresh_per_second=8) as live:
        while True:
            d = client.describe_cluster(ClusterName=CLUSTER)
            t = Table(title=f"{CLUSTER}: {d['ClusterStatus']}  ({time.monotonic() - started:4.1f} s)")
            for col in ("group", "type", "partition", "current/target", "status"):
                t.add_column(col)
            for g in d["InstanceGroups"]:
                sc = g.get("SlurmConfig", {})
                t.add_row(g["InstanceGroupName"], sc.get("NodeType", ""), ",".join(sc.get("PartitionNames", [])),
                          f"{g['CurrentCount']}/{g['TargetCount']}", g["Status"])
            live.update(t)
            if d["ClusterStatus"] in ("InService", "Failed"):
                return dict(d)
            if time.monotonic() - started > 300:
                raise SystemExit("slurmpod: the cluster did not become InService within 5 minutes")
            time.sleep(0.2)


def _in_node(state: Path, db: str, *argv: str) -> subprocess.CompletedProcess[str]:
    from slurmpod.cli.connect import resolve
    from slurmpod.providers.local.provider import LocalProvider
    from slurmpod.store.sql import SqlStore

    store = SqlStore(db)
    try:
        node = resolve(store, None, CLUSTER, None)
    finally:
        store.close()
    r = LocalProvider(state).runner(node.cluster_id, node.instance_id).run(list(argv), timeout=60)
    return subprocess.CompletedProcess(list(argv), r.returncode, r.stdout, r.stderr)


def run_demo(state: Path, port: int) -> int:
    from slurmpod.providers.base import SetupError
    from slurmpod.providers.local.hostcheck import check_host

    try:
        check_host(state)
    except SetupError as exc:
        console.print(f"[red]slurmpod: {exc}[/]")
        return 2
    db = f"sqlite:///{state / 'slurmpod.db'}"
    _credential(state)  # before the server starts, so its first request is already signed with a known key
    _start_server(state, port)
    client = _client(state, port)
    console.rule("1. CreateCluster (seed 000: controller-group + compute-group in partition `compute`)")
    try:
        arn = client.create_cluster(ClusterName=CLUSTER, InstanceGroups=_groups(),
                                    Orchestrator={"Slurm": {"SlurmConfigStrategy": "Managed"}})["ClusterArn"]
        console.print(f"ClusterArn: {arn}")
    except client.exceptions.ResourceInUse:
        console.print("the demo cluster already exists; reusing it")
    d = _progress(client)
    if d["ClusterStatus"] != "InService":
        console.print(f"[red]cluster failed: {d.get('FailureMessage')}[/]")
        return 1
    cluster_id = d["ClusterArn"].rsplit("/", 1)[1]
    console.rule("2. sinfo (on the controller)")
    console.print(_in_node(state, db, "sinfo").stdout)
    console.rule('3. sbatch --partition=compute --wrap="hostname && sleep 5"')
    sub = _in_node(state, db, "bash", "-c",
                   'cd /home && sbatch --parsable --partition=compute --wrap="hostname && sleep 5"')
    if sub.returncode != 0:
        console.print(f"[red]sbatch failed: {sub.stderr}[/]")
        return 1
    job = sub.stdout.strip()
    console.print(f"Submitted batch job {job}")
    time.sleep(1.5)
    console.print(_in_node(state, db, "squeue").stdout)
    deadline = time.monotonic() + 120
    while _in_node(state, db, "squeue", "-h", "-j", job).stdout.strip():
        if time.monotonic() > deadline:
            console.print("[red]the job did not finish within 2 minutes[/]")
            return 1
        time.sleep(0.5)
    out = _in_node(state, db, "cat", f"/home/slurm-{job}.out").stdout.strip()
    console.print(f"job {job} completed; its output (slurm-{job}.out): [bold green]{out}[/]")
    console.rule(f"4. sacct -j {job} (accounting: slurmdbd + MariaDB on the cluster's accounting host)")
    deadline = time.monotonic() + 30
    acct = ""
    while time.monotonic() < deadline:  # the record reaches slurmdbd a moment after the job ends
        acct = _in_node(state, db, "sacct", "-X", "-j", job, "-o", "JobID,JobName,Partition,State,Elapsed,NodeList"
                        ).stdout
        if "COMPLETED" in acct:
            break
        time.sleep(0.5)
    console.print(acct or "[yellow]sacct shows nothing (is the server running with --accounting none?)[/]")
    nodes = client.list_cluster_nodes(ClusterName=CLUSTER)["ClusterNodeSummaries"]
    ctl = next(n for n in nodes if n["InstanceGroupName"] == "controller-group")
    cred = _credential(state)
    from slurmpod.settings import default_state_dir

    where = "" if state == default_state_dir() else f" --state-dir {state}"
    down = f"slurmpod demo --down{where}" + ("" if port == 8080 else f" --port {port}")
    console.rule("Next")
    console.print(
        "Connect (HyperPod's SSM target syntax):\n"
        f"  slurmpod connect sagemaker-cluster:{cluster_id}_controller-group-{ctl['InstanceId']}{where}\n"
        f"  slurmpod connect --cluster {CLUSTER}{where} -- sinfo\n"
        "Use the API (AWS CLI or boto3) with the demo's access key (`slurmpod credentials create` makes more):\n"
        f"  export AWS_ACCESS_KEY_ID={cred.access_key_id} AWS_SECRET_ACCESS_KEY={cred.secret_access_key} "
        f"AWS_DEFAULT_REGION={REGION}\n"
        f"  aws sagemaker describe-cluster --cluster-name {CLUSTER} --endpoint-url http://127.0.0.1:{port}\n"
        "Tear down (deletes the cluster, stops the server):\n"
        f"  {down}",
        soft_wrap=True,  # keep the export line copy-pastable
    )
    return 0


def run_down(state: Path, port: int) -> int:
    if _answers(port):
        client = _client(state, port)
        try:
            client.delete_cluster(ClusterName=CLUSTER)
            console.print(f"deleting {CLUSTER} ...")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    client.describe_cluster(ClusterName=CLUSTER)
                except client.exceptions.ResourceNotFound:
                    break
                time.sleep(0.2)
            console.print("cluster deleted")
        except client.exceptions.ResourceNotFound:
            console.print("no demo cluster")
    pid_file = state / "server.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            if "slurmpod" in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGTERM)
                console.print(f"stopped the slurmpod server (pid {pid})")
        except (FileNotFoundError, ProcessLookupError):
            pass
        pid_file.unlink(missing_ok=True)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    return run_down(state, args.port) if args.down else run_demo(state, args.port)
