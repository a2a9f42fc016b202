"""AccountingDatabase: slurmdbd of a real cluster stores into an external MariaDB the test runs itself.

The database runs on the host (a process of this test, its own datadir and socket) and listens on an address
of a host-side veth pair the test creates, so nodes reach it through their bridge's gateway like any external
endpoint; the secret is made with `slurmpod secrets create`. Then: sacct works, the job rows are in the
external database (schema named by AccountingDatabase.Name), the accounting host runs no MariaDB of its own,
and the password appears in no API output, event, log line or process list.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmpod.slurm.accounting import accounting_instance_id
from tests.integration.conftest import in_node
from tests.integration.test_accounting_local import _wait_sacct
from tests.serverproc import ROLE, ServerProcess, free_port, wait_status

DB_IP = "10.253.77.1"
PASSWORD = "Ext-Pa55word_9z"
USER = "slurm_ext"
SCHEMA = "ext_acct"


@dataclass
class ExternalDb:
    ip: str
    port: int
    socket: Path

    def sql(self, statement: str) -> str:
        r = subprocess.run(["mariadb", "--no-defaults", "--protocol=socket", f"--socket={self.socket}", "--user=root",
                            "--batch", "--skip-column-names"], input=statement, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout


@pytest.fixture
def external_db(tmp_path: Path) -> Iterator[ExternalDb]:
    for tool in ("mariadbd", "mariadb-install-db", "slurmdbd"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            pytest.skip(f"{tool} not installed")
    link = f"spdbt{os.getpid() % 100000}"
    datadir, sock = tmp_path / "db", tmp_path / "mysqld.sock"
    port = free_port()
    # a veth pair kept on the host (the kernel here may lack the dummy module); removing one end removes both
    subprocess.run(["ip", "link", "add", link, "type", "veth", "peer", "name", link + "p"], check=True, timeout=10)
    proc: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run(["ip", "addr", "add", f"{DB_IP}/32", "dev", link], check=True, timeout=10)
        for dev in (link, link + "p"):
            subprocess.run(["ip", "link", "set", dev, "up"], check=True, timeout=10)
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=root",
                        "--auth-root-authentication-method=socket", "--skip-test-db"],
                       check=True, capture_output=True, timeout=180)
        log = open(tmp_path / "mariadbd.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(["/usr/sbin/mariadbd", "--no-defaults", "--user=root", f"--datadir={datadir}",
                                 f"--socket={sock}", f"--pid-file={tmp_path / 'mysqld.pid'}",
                                 f"--bind-address={DB_IP}", f"--port={port}", "--skip-name-resolve",
                                 "--innodb-buffer-pool-size=64M"], stdout=log, stderr=log)
        db = ExternalDb(DB_IP, port, sock)
        deadline = time.monotonic() + 60
        while True:
            r = subprocess.run(["mariadb", "--no-defaults", f"--socket={sock}", "--user=root", "-e", "SELECT 1"],
                               capture_output=True, timeout=10)
            if r.returncode == 0:
                break
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mariadbd.log").read_text()
            time.sleep(0.2)
        db.sql(f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}';\n"
               f"GRANT ALL ON `{SCHEMA}`.* TO '{USER}'@'%';\nFLUSH PRIVILEGES;\n")
        yield db
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        subprocess.run(["ip", "link", "del", link], timeout=10)


def _groups() -> list[dict[str, object]]:
    return [
        {"InstanceGroupName": "controller", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "compute", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["work"]}},
    ]


@pytest.mark.integration
# external_db comes first: it is torn down after the cluster, whose slurmctld flushes to slurmdbd when it stops
def test_sacct_rows_land_in_the_external_database(external_db: ExternalDb, local_server: ServerProcess,
                                                   tmp_path: Path) -> None:
    server = local_server
    state = server.state_dir
    secret_file = tmp_path / "secret.json"
    secret_file.write_text(json.dumps({"username": USER, "password": PASSWORD}))
    out = subprocess.run([sys.executable, "-m", "slurmpod.cli", "secrets", "create", "ext-acct-db", "--from-file",
                          str(secret_file), "--state-dir", str(state)], capture_output=True, text=True, timeout=60,
                         check=True)
    arn = json.loads(out.stdout)["ARN"]
    assert PASSWORD not in out.stdout

    c = server.client()
    t0 = time.monotonic()
    c.create_cluster(ClusterName="ext", InstanceGroups=_groups(), NodeProvisioningMode="Continuous",
                     Orchestrator={"Slurm": {"AccountingDatabase": {
                         "Endpoint": external_db.ip, "Port": external_db.port, "Name": SCHEMA, "SecretArn": arn}}})
    d = wait_status(c, "ext", {"InService", "Failed"}, timeout=180)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    deadline = time.monotonic() + 120
    while any(n["InstanceStatus"]["Status"] != "Running"
              for n in c.list_cluster_nodes(ClusterName="ext")["ClusterNodeSummaries"]) or \
            len(c.list_cluster_nodes(ClusterName="ext")["ClusterNodeSummaries"]) < 2:
        assert time.monotonic() < deadline, "nodes never all Running"
        time.sleep(0.5)
    print(f"\nInService with an external accounting database after {time.monotonic() - t0:.1f}s")

    r = in_node(state, "ext", None, "bash", "-c", "cd /home && sbatch --parsable -p work --wrap='hostname'")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    print("sacct:", _wait_sacct(state, "ext", job, timeout=90))
    rows = external_db.sql(f"SELECT id_job, state FROM `{SCHEMA}`.`ext_job_table` WHERE id_job = {int(job)};")
    assert rows.split()[:1] == [job], rows

    # the accounting host runs slurmdbd only (no MariaDB of its own)
    from slurmpod.providers.local.provider import LocalProvider

    cid = d["ClusterArn"].rsplit("/", 1)[1]
    runner = LocalProvider(state).runner(cid, accounting_instance_id(cid))
    ps_node = runner.run(["ps", "-eo", "args"], timeout=10).stdout
    assert "slurmdbd" in ps_node and "mariadbd" not in ps_node

    # the password is nowhere: API output, events, server log, any process list on the machine
    desc = c.describe_cluster(ClusterName="ext")
    assert desc["Orchestrator"]["Slurm"]["AccountingDatabase"]["SecretArn"] == arn
    events = c.list_cluster_events(ClusterName="ext", MaxResults=100)["Events"]
    ps_host = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=10).stdout
    for where, text in (("DescribeCluster", json.dumps(desc, default=str)),
                        ("events", json.dumps(events, default=str)),
                        ("server log", (state / "server.log").read_text()), ("ps", ps_host + ps_node)):
        assert PASSWORD not in text, f"password found in {where}"
