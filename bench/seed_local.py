"""Scenario 1, seed topology on the local provider: slurmpod (real API) and the floor, interleaved."""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.api_run import ApiRun, delete_and_wait, run_slurmpod
from bench.floor import FloorRun, run_floor
from bench.server import BenchServer
from bench.stats import figure, median_of_dicts, summary

log = logging.getLogger("bench")

NAME = "seed_local"
DESCRIPTION = ("Seed topology (1 controller + 2 compute, ml.t3.medium, partition compute) on the local "
               "provider: CreateCluster -> InService and -> first `sbatch --partition=compute --wrap=hostname` "
               "COMPLETED through the real API, side by side with the floor (the same daemons started by a "
               "plain script without slurmpod). The ratios compare equal work: slurmpod with `--accounting none` "
               "(the floor runs no slurmdbd); `slurmpod_with_accounting` is the default configuration "
               "(slurmdbd + MariaDB on the cluster's accounting host), measured in the same rounds")
TARGET_IN_SERVICE = 3.0
TARGET_JOB_DONE = 8.0
TARGET_RATIO_IN_SERVICE = 3.0

Progress = Callable[[str], None]


def _cleanup_dir(path: Path) -> list[str]:
    from slurmpod.providers.local.cleanup import cleanup, find_leftovers

    removed = cleanup(path) if path.exists() else []
    left = find_leftovers(path) if path.exists() else []
    if removed:
        log.warning("cleanup removed leftovers of %s: %s", path, removed)
    return left


def run(runs: int, workdir: Path | None = None, progress: Progress = print,
        reconcile_interval: float | None = None) -> dict[str, Any]:
    """``runs`` slurmpod runs and ``runs`` floor runs, alternating (and flipping the order each round)."""
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-", dir=workdir))
    server = BenchServer(root / "server", reconcile_interval=reconcile_interval, extra=("--accounting", "none"))
    acct_server = BenchServer(root / "server-acct", reconcile_interval=reconcile_interval)
    api_runs: list[ApiRun] = []
    acct_runs: list[ApiRun] = []
    floor_runs: list[FloorRun] = []
    left: list[str] = []
    try:
        server.start()
        acct_server.start()
        for i in range(runs):
            order = ("slurmpod", "accounting", "floor") if i % 2 == 0 else ("floor", "accounting", "slurmpod")
            for which in order:
                if which in ("slurmpod", "accounting"):
                    srv, runs_list = (server, api_runs) if which == "slurmpod" else (acct_server, acct_runs)
                    a = run_slurmpod(srv, f"bench-seed-{i + 1}")
                    runs_list.append(a)
                    label = "slurmpod:" if which == "slurmpod" else "+accounting:"
                    progress(f"run {i + 1}/{runs} {label:12} InService {a.in_service:.2f}s, "
                             f"job done {a.job_done:.2f}s (delete {a.delete:.2f}s)")
                else:
                    f = run_floor(root / "floor")
                    floor_runs.append(f)
                    progress(f"run {i + 1}/{runs} floor:    all idle  {f.all_idle:.2f}s, job done {f.job_done:.2f}s")
    except BaseException:
        for srv in (server, acct_server):
            if srv.log.exists():
                progress(srv.log_tail())
        raise
    finally:
        for srv in (server, acct_server):
            try:
                if srv.proc is not None and srv.proc.poll() is None:
                    client = srv.client()
                    for c in client.list_clusters()["ClusterSummaries"]:
                        delete_and_wait(client, c["ClusterName"])
            except Exception as exc:  # best effort: the state-dir cleanup below removes the rest
                log.warning("deleting clusters through the API failed: %s", exc)
            srv.stop()
        left = (_cleanup_dir(root / "server") + _cleanup_dir(root / "server-acct")
                + _cleanup_dir(root / "floor"))
        if left:
            log.error("leftovers remain under %s: %s", root, left)
        else:
            shutil.rmtree(root, ignore_errors=True)
    doc = result_doc(api_runs, floor_runs, acct_runs)
    doc["reconcile_interval"] = reconcile_interval if reconcile_interval is not None else "server default"
    return doc


def result_doc(api_runs: list[ApiRun], floor_runs: list[FloorRun],
               acct_runs: list[ApiRun] | None = None) -> dict[str, Any]:
    sp_in = [a.in_service for a in api_runs]
    sp_job = [a.job_done for a in api_runs]
    fl_idle = [f.all_idle for f in floor_runs]
    fl_job = [f.job_done for f in floor_runs]
    slurmpod = {
        "in_service": summary(sp_in, target=TARGET_IN_SERVICE),
        "job_done": summary(sp_job, target=TARGET_JOB_DONE),
        "sbatch_to_completed": summary([a.sbatch_to_completed for a in api_runs]),
        "connect_overhead": summary([a.connect_overhead for a in api_runs]),
        "delete_to_gone": summary([a.delete for a in api_runs]),
        "server_log_milestones_median": median_of_dicts([a.milestones for a in api_runs]),
    }
    floor = {
        "all_idle": summary(fl_idle),
        "job_done": summary(fl_job),
        "sbatch_to_completed": summary([f.sbatch_to_completed for f in floor_runs]),
        "phases_median": median_of_dicts([f.phases for f in floor_runs]),
    }
    ratios = {
        "in_service": figure(statistics.median(sp_in) / statistics.median(fl_idle), "ratio",
                             TARGET_RATIO_IN_SERVICE),
        "job_done": figure(statistics.median(sp_job) / statistics.median(fl_job), "ratio"),
    }
    doc = {"description": DESCRIPTION, "runs": len(api_runs), "slurmpod": slurmpod, "floor": floor,
           "ratios": ratios}
    if acct_runs:
        doc["slurmpod_with_accounting"] = {
            "in_service": summary([a.in_service for a in acct_runs], target=TARGET_IN_SERVICE),
            "job_done": summary([a.job_done for a in acct_runs], target=TARGET_JOB_DONE),
            "delete_to_gone": summary([a.delete for a in acct_runs]),
        }
    return doc
