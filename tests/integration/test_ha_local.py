"""Two controllers on real Slurm: kill every process of the primary; a backup takes over, jobs survive,
events and a webhook notification tell the story, NodeRecovery brings the controller back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tests.integration.conftest import in_node
from tests.serverproc import seed_groups, wait_status

pytestmark = pytest.mark.integration


class _Receiver(BaseHTTPRequestHandler):
    got: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        _Receiver.got.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def _job_state(state, job: str) -> str:
    out = in_node(state, "ha", "compute-group", "scontrol", "show", "job", job).stdout
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("JobState=")), "?")


def test_controller_failover(local_server):
    state = local_server.state_dir
    httpd = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Receiver.got = []
    try:
        c = local_server.client()
        groups = seed_groups(2)
        groups[0]["InstanceCount"] = 2
        c.create_cluster(ClusterName="ha", InstanceGroups=groups)
        d = wait_status(c, "ha", {"InService", "Failed"}, timeout=120)
        assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
        r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "webhooks", "--state-dir", str(state), "add", "ha",
                            f"http://127.0.0.1:{httpd.server_address[1]}/hook"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        ping = in_node(state, "ha", "compute-group", "scontrol", "ping").stdout
        assert ping.count("is UP") == 2, ping

        nodes = c.list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]
        ctls = sorted((n for n in nodes if n["InstanceGroupName"] == "controller-group"),
                      key=lambda n: n["LaunchTime"])
        long_job = in_node(state, "ha", "compute-group", "bash", "-c", "cd /home && sbatch --parsable -N2 "
                           "--exclusive --wrap='sleep 25; echo long-done'").stdout.strip()
        queued = in_node(state, "ha", "compute-group", "bash", "-c",
                         "cd /home && sbatch --parsable -N1 --wrap='echo queued-done'").stdout.strip()
        deadline = time.monotonic() + 30
        while _job_state(state, long_job) != "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert _job_state(state, queued) == "PENDING"
        time.sleep(5)  # slurmctld saves job state asynchronously; jobs younger than ~1 s can be lost (Slurm 22.05)

        primary = ctls[0]
        meta = json.loads(next(state.glob(f"local/**/{primary['InstanceId']}/meta.json")).read_text())
        os.kill(meta["holder_pid"], signal.SIGKILL)
        t0 = time.monotonic()
        while in_node(state, "ha", "compute-group", "squeue", "-h", timeout=30).returncode != 0 or \
                in_node(state, "ha", "compute-group", "sbatch", "--wrap=true", "-o", "/dev/null").returncode != 0:
            assert time.monotonic() - t0 < 40, "no controller answered"
            time.sleep(0.5)
        took = time.monotonic() - t0
        print(f"\nsqueue/sbatch answered again {took:.1f} s after the primary controller died")
        assert took <= 20

        def output(job: str) -> str:
            return in_node(state, "ha", "compute-group", "cat", f"/home/slurm-{job}.out").stdout.strip()

        deadline = time.monotonic() + 90  # both jobs finish: the running one was not killed, the queued one ran
        while (output(long_job), output(queued)) != ("long-done", "queued-done"):
            if os.environ.get("HA_DEBUG"):
                print(in_node(state, "ha", "compute-group", "scontrol", "show", "job", queued).stdout[:300],
                      in_node(state, "ha", "compute-group", "scontrol", "ping").stdout)
            assert time.monotonic() < deadline, (output(long_job), output(queued))
            time.sleep(3)

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            kinds = [json.loads(m["Message"])["Event"] for m in _Receiver.got]
            if "ControllerDown" in kinds and "ControllerUp" in kinds:
                break
            time.sleep(0.5)
        assert "ControllerDown" in kinds and "ControllerUp" in kinds, kinds
        texts = [e["Description"] for e in c.list_cluster_events(ClusterName="ha", MaxResults=100)["Events"]]
        assert any("is down; backup controller" in t for t in texts), texts
        d = c.describe_cluster(ClusterName="ha")
        g = next(g for g in d["InstanceGroups"] if g["InstanceGroupName"] == "controller-group")
        assert g["CurrentCount"] == 2
        deadline = time.monotonic() + 60
        while in_node(state, "ha", "compute-group", "scontrol", "ping").stdout.count("is UP") != 2:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        httpd.shutdown()
