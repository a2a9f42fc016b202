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
        while (sq := in_node(state, "ha", "compute-group", "squeue", "-h", timeout=30)).returncode != 0 or \
                (sb := in_node(state, "ha", "compute-group", "sbatch", "--wrap=true", "-o", "/dev/null")).returncode:
            # (a liveness bound, not a speed target: 40 s failed twice here under the other worker's load, once per
            # Slurm release, and passed alone each time; past it, what the clients and the controllers said)
            if time.monotonic() - t0 >= 60:
                ping = in_node(state, "ha", "compute-group", "scontrol", "ping", timeout=30)
                nodes = [(n["InstanceId"], n["InstanceStatus"]["Status"])
                         for n in c.list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]]
                raise AssertionError(f"no controller answered: squeue {sq.stderr.strip()[-300:]!r}; sbatch "
                                     f"{(sb.stderr.strip()[-300:] if sq.returncode == 0 else '(not run)')!r}; "
                                     f"scontrol ping {ping.stdout.strip()!r}; nodes {nodes}")
            time.sleep(0.5)
        took = time.monotonic() - t0
        # (how long it takes is measured, not asserted: the loop above bounds it; SlurmctldTimeout=10 s + retries)
        print(f"\nsqueue/sbatch answered again {took:.1f} s after the primary controller died")

        def output(job: str) -> str:
            return in_node(state, "ha", "compute-group", "cat", f"/home/slurm-{job}.out").stdout.strip()

        deadline = time.monotonic() + 90  # both jobs finish: the running one was not killed, the queued one ran
        while (output(long_job), output(queued)) != ("long-done", "queued-done"):
            if os.environ.get("HA_DEBUG"):
                print(in_node(state, "ha", "compute-group", "scontrol", "show", "job", queued).stdout[:300],
                      in_node(state, "ha", "compute-group", "scontrol", "ping").stdout)
            assert time.monotonic() < deadline, (output(long_job), output(queued))
            time.sleep(3)

        # accounting (on by default) recorded both jobs across the failover
        deadline = time.monotonic() + 60
        while True:
            rows = in_node(state, "ha", "compute-group", "sacct", "-n", "-X", "-P", "-j", f"{long_job},{queued}",
                           "-o", "JobID,State").stdout.split()
            if sorted(rows) == sorted([f"{long_job}|COMPLETED", f"{queued}|COMPLETED"]):
                break
            assert time.monotonic() < deadline, rows
            time.sleep(1)
        print("sacct:", rows)

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


def _two_controllers(c, compute: int = 1) -> dict:
    """A cluster "ha" with a 2-instance Controller group, InService."""
    groups = seed_groups(compute)
    groups[0]["InstanceCount"] = 2
    c.create_cluster(ClusterName="ha", InstanceGroups=groups)
    d = wait_status(c, "ha", {"InService", "Failed"}, timeout=120)
    assert d["ClusterStatus"] == "InService", d.get("FailureMessage")
    return d


class _SqueuePoller:
    """Runs `squeue -h` in a compute node once a second (in-process nsenter: a poll costs milliseconds, not a
    CLI start); ``polls`` holds (start, exit code, seconds it took)."""

    def __init__(self, state, c, cluster_arn: str) -> None:
        from slurmpod.providers.local.provider import LocalProvider

        compute = next(n for n in c.list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]
                       if n["InstanceGroupName"] == "compute-group")
        self.runner = LocalProvider(state).runner(cluster_arn.rsplit("/", 1)[1], compute["InstanceId"])
        self.polls: list[tuple[float, int, float]] = []
        self.errors: list[str] = []  # stderr of the failed polls
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            res = self.runner.run(["squeue", "-h"], timeout=60)
            self.polls.append((t, res.returncode, time.monotonic() - t))
            if res.returncode != 0:
                self.errors.append(f"{time.monotonic():.1f}: {res.stderr.strip()[-300:]}")
            self._stop.wait(max(0.0, 1.0 - (time.monotonic() - t)))

    def __enter__(self) -> _SqueuePoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=90)

    def report(self, during: str) -> list[tuple[float, int, float]]:
        failures = [p for p in self.polls if p[1] != 0]
        span = self.polls[-1][0] - self.polls[0][0] if self.polls else 0.0
        slowest = max((p[2] for p in self.polls), default=0.0)
        print(f"\nsqueue polled {len(self.polls)} times over {span:.0f} s {during}; {len(failures)} failed; "
              f"slowest answer {slowest:.2f} s" + "".join(f"\n  {e}" for e in self.errors))
        return failures

def test_rolling_update_of_two_controllers_keeps_squeue_answering(local_server, tmp_path):
    """UpdateClusterSoftware of a 2-controller group: one controller at a time, the one in charge hands over
    (scontrol takeover) before it stops; squeue, polled every second from a compute node, never fails."""
    state = local_server.state_dir
    c = local_server.client()
    d = _two_controllers(c)
    script = tmp_path / "setup.sh"
    script.write_text("echo release-2 > /etc/slurmpod-release-marker\n")
    r = subprocess.run([sys.executable, "-m", "slurmpod.cli", "images", "--state-dir", str(state), "publish",
                        "--script", str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    image = r.stdout.split()[1]

    with _SqueuePoller(state, c, d["ClusterArn"]) as poller:
        c.update_cluster_software(ClusterName="ha", ImageId=image,
                                  InstanceGroups=[{"InstanceGroupName": "controller-group"}])
        time.sleep(1)
        d = wait_status(c, "ha", {"InService"}, timeout=240)
        deadline = time.monotonic() + 240
        while True:
            d = c.describe_cluster(ClusterName="ha")
            g = next(g for g in d["InstanceGroups"] if g["InstanceGroupName"] == "controller-group")
            if g.get("SoftwareUpdateStatus") in ("Succeeded", "Failed", "RollbackComplete"):
                break
            assert time.monotonic() < deadline, g
            time.sleep(1)
        assert g["SoftwareUpdateStatus"] == "Succeeded", d.get("FailureMessage")
        time.sleep(3)  # the replaced primary takes control back: keep polling through that too
    failures = poller.report("during the rolling controller update")
    assert len(poller.polls) >= 3  # one poll can take ~6-7 s while control moves
    assert not failures, failures
    texts = [e["Description"] for e in c.list_cluster_events(ClusterName="ha", MaxResults=100)["Events"]]
    assert sum(t.startswith("Root volume replacement started for Instance") for t in texts) == 2
    nodes = c.list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]
    assert {n["ImageVersionStatus"] for n in nodes if n["InstanceGroupName"] == "controller-group"} == {"UpToDate"}
    assert in_node(state, "ha", "compute-group", "scontrol", "ping").stdout.count("is UP") == 2


def test_replacing_the_primary_controller_keeps_its_address(local_server):
    """BatchReplaceClusterNodes of the primary: a new instance takes over the old one's address, hostname and
    SlurmctldHost slot, so slurm.conf, the other controller and every slurmd keep working unchanged; jobs and
    srun from a compute node work afterwards."""
    state = local_server.state_dir
    c = local_server.client()
    _two_controllers(c, compute=2)
    nodes = c.list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]
    primary = min((n for n in nodes if n["InstanceGroupName"] == "controller-group"), key=lambda n: n["LaunchTime"])
    old_ip = c.describe_cluster_node(ClusterName="ha", NodeId=primary["InstanceId"])["NodeDetails"][
        "PrivatePrimaryIp"]
    slurmd_before = in_node(state, "ha", "compute-group", "pgrep", "-x", "slurmd").stdout.split()
    c.batch_replace_cluster_nodes(ClusterName="ha", NodeIds=[primary["InstanceId"]])
    deadline = time.monotonic() + 180
    while True:
        now = c.list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]
        ctl = [n for n in now if n["InstanceGroupName"] == "controller-group"]
        if primary["InstanceId"] not in {n["InstanceId"] for n in now} and len(ctl) == 2 and \
                all(n["InstanceStatus"]["Status"] == "Running" for n in now):
            break
        assert time.monotonic() < deadline, now
        time.sleep(1)
    new = next(n for n in ctl if n["LaunchTime"] > primary["LaunchTime"])
    assert new["InstanceId"] != primary["InstanceId"]
    assert new["PrivateDnsHostname"] == primary["PrivateDnsHostname"]
    new_ip = c.describe_cluster_node(ClusterName="ha", NodeId=new["InstanceId"])["NodeDetails"]["PrivatePrimaryIp"]
    assert new_ip == old_ip
    conf = in_node(state, "ha", "compute-group", "cat", "/var/lib/slurm/slurmd/conf-cache/slurm.conf").stdout
    assert f"SlurmctldHost={primary['PrivateDnsHostname']}({old_ip})" in conf.splitlines()[:20] or old_ip in conf
    # the compute node's slurmd was not restarted: nothing it knows changed
    assert in_node(state, "ha", "compute-group", "pgrep", "-x", "slurmd").stdout.split() == slurmd_before
    deadline = time.monotonic() + 60
    while in_node(state, "ha", "compute-group", "scontrol", "ping").stdout.count("is UP") != 2:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    r = in_node(state, "ha", "compute-group", "bash", "-c", "srun -N2 hostname | sort | uniq | wc -l", timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "2", (r.stdout, r.stderr)


def test_replacing_both_controllers_goes_one_at_a_time(local_server):
    """BatchReplaceClusterNodes naming both controllers: the second waits until the first's replacement runs,
    so a controller always serves (seen through the API every 0.5 s and by `scontrol ping` at the end); each
    successor keeps its predecessor's address, and squeue polled every second from a compute node never fails."""
    state = local_server.state_dir
    c = local_server.client()
    d = _two_controllers(c)
    nodes = c.list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]
    old = {n["InstanceId"] for n in nodes if n["InstanceGroupName"] == "controller-group"}
    with _SqueuePoller(state, c, d["ClusterArn"]) as poller:
        out = c.batch_replace_cluster_nodes(ClusterName="ha", NodeIds=sorted(old))
        assert sorted(out["Successful"]) == sorted(old), out
        deadline = time.monotonic() + 240
        while True:
            now = c.list_cluster_nodes(ClusterName="ha")["ClusterNodeSummaries"]
            ctl = {n["InstanceId"]: n for n in now if n["InstanceGroupName"] == "controller-group"}
            if not (old & set(ctl)) and len(ctl) == 2 and \
                    all(n["InstanceStatus"]["Status"] == "Running" for n in now):
                break
            # never both old controllers gone before a new one runs
            running = [n for n in ctl.values() if n["InstanceStatus"]["Status"] == "Running"]
            assert running, now
            assert time.monotonic() < deadline, now
            time.sleep(0.5)
        time.sleep(3)
    failures = poller.report("while both controllers were replaced")
    assert not failures, failures
    texts = [e["Description"] for e in c.list_cluster_events(ClusterName="ha", MaxResults=100)["Events"]]
    assert any("is queued: controllers are replaced one at a time" in t for t in texts), texts
    assert in_node(state, "ha", "compute-group", "scontrol", "ping").stdout.count("is UP") == 2
    r = in_node(state, "ha", "compute-group", "bash", "-c", "srun -N1 hostname", timeout=60)
    assert r.returncode == 0, r.stderr
