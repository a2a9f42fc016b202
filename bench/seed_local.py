"""Scenario 1, seed topology on the local provider: slurmpod (real API) and the floor, interleaved."""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.api_run import ApiRun, run_slurmpod, stop_server
from bench.floor import FloorRun, floor_image, run_floor
from bench.server import BenchServer
from bench.stats import figure, median_of_dicts, summary
from slurmpod.lifecycle.images import Image

log = logging.getLogger("bench")

NAME = "seed_local"
DESCRIPTION = ("Seed topology (1 controller + 2 compute, ml.t3.medium, partition compute) on the local "
               "provider: CreateCluster -> InService and -> first `sbatch --partition=compute --wrap=hostname` "
               "COMPLETED through the real API, side by side with the floor (the same nodes, booted from the same "
               "image, and the same daemons started by a plain script without slurmpod). Four sides, interleaved: "
               "slurmpod `--accounting none` vs the floor without an accounting host (equal work), and slurmpod's "
               "default configuration (slurmdbd + MariaDB on the cluster's accounting host) vs the floor with the "
               "same accounting host (`floor_with_accounting`, slurmpod's AccountingService)")
TARGET_IN_SERVICE = 3.0
TARGET_JOB_DONE = 8.0
TARGET_RATIO_IN_SERVICE = 3.0  # issue 8, equal work without accounting
TARGET_RATIO_DEFAULT = 2.0  # issue 14: the default configuration vs the same systemd nodes started by a script
TARGET_RATIO_ACCOUNTING = 1.5  # issue 21: InService with accounting (the default) vs `--accounting none`

Progress = Callable[[str], None]


def _cleanup_dir(path: Path) -> list[str]:
    from slurmpod.providers.local.cleanup import cleanup, find_leftovers

    removed = cleanup(path) if path.exists() else []
    left = find_leftovers(path) if path.exists() else []
    if removed:
        log.warning("cleanup removed leftovers of %s: %s", path, removed)
    return left


def _server_extra(node_image: str) -> tuple[str, ...]:
    return () if node_image == "default" else ("--node-image", node_image)  # the server's default is "default"


def run(runs: int, workdir: Path | None = None, progress: Progress = print,
        reconcile_interval: float | None = None, *, node_image: str = "default",
        floor_accounting: bool = True) -> dict[str, Any]:
    """``runs`` runs of each side, alternating (and flipping the order each round). ``node_image``: the image of
    every node, slurmpod's and the floor's (``default``: the image store's default; ``builtin``: the legacy
    host-root image); ``floor_accounting``: also run the floor with an accounting host."""
    image = floor_image(node_image)  # fails early, with what to do, when the image is missing
    root = Path(tempfile.mkdtemp(prefix="slurmpod-bench-", dir=workdir))
    extra = _server_extra(node_image)
    server = BenchServer(root / "server", reconcile_interval=reconcile_interval,
                         extra=("--accounting", "none", *extra))
    acct_server = BenchServer(root / "server-acct", reconcile_interval=reconcile_interval, extra=extra)
    api_runs: list[ApiRun] = []
    acct_runs: list[ApiRun] = []
    floor_runs: list[FloorRun] = []
    floor_acct_runs: list[FloorRun] = []
    sides = ["slurmpod", "accounting", "floor"] + (["floor+accounting"] if floor_accounting else [])
    try:
        server.start()
        acct_server.start()
        for i in range(runs):
            for which in (sides if i % 2 == 0 else sides[::-1]):
                if which in ("slurmpod", "accounting"):
                    srv, runs_list = (server, api_runs) if which == "slurmpod" else (acct_server, acct_runs)
                    a = run_slurmpod(srv, f"bench-seed-{i + 1}")
                    runs_list.append(a)
                    label = "slurmpod:" if which == "slurmpod" else "+accounting:"
                    progress(f"run {i + 1}/{runs} {label:17} InService {a.in_service:.2f}s, "
                             f"job done {a.job_done:.2f}s (delete {a.delete:.2f}s)")
                else:
                    with_acct = which == "floor+accounting"
                    f = run_floor(root / ("floor-acct" if with_acct else "floor"), image=image, accounting=with_acct)
                    (floor_acct_runs if with_acct else floor_runs).append(f)
                    progress(f"run {i + 1}/{runs} {which + ':':17} all idle  {f.all_idle:.2f}s, "
                             f"job done {f.job_done:.2f}s")
    except BaseException:
        for srv in (server, acct_server):
            if srv.log.exists():
                progress(srv.log_tail())
                kept = root.parent / f"{root.name}-{srv.state_dir.name}.log"  # the state dir goes below
                shutil.copyfile(srv.log, kept)
                progress(f"server log kept in {kept}")
        raise
    finally:
        for srv in (server, acct_server):
            stop_server(srv, log.warning)
        left = [x for d in ("server", "server-acct", "floor", "floor-acct") for x in _cleanup_dir(root / d)]
        if left:
            log.error("leftovers remain under %s: %s", root, left)
        else:
            shutil.rmtree(root, ignore_errors=True)
    doc = result_doc(api_runs, floor_runs, acct_runs, floor_acct_runs)
    doc["reconcile_interval"] = reconcile_interval if reconcile_interval is not None else "server default"
    doc["node_image"] = image_doc(image)
    return doc


def image_doc(image: Image) -> dict[str, Any]:
    """Which image the nodes of both sides booted (``kind`` rootfs: systemd is PID 1 in every node)."""
    return {"id": image.image_id, "kind": image.kind, "release": image.release, "suite": image.suite,
            "systemd": image.kind == "rootfs"}


def result_doc(api_runs: list[ApiRun], floor_runs: list[FloorRun],
               acct_runs: list[ApiRun] | None = None,
               floor_acct_runs: list[FloorRun] | None = None) -> dict[str, Any]:
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
            "server_log_milestones_median": median_of_dicts([a.milestones for a in acct_runs]),
        }
        # what accounting costs slurmpod: the default configuration against `--accounting none`, same run
        ratios["accounting_on_off"] = figure(
            statistics.median(a.in_service for a in acct_runs) / statistics.median(sp_in), "ratio",
            TARGET_RATIO_ACCOUNTING)
    if floor_acct_runs:
        fa_idle = [f.all_idle for f in floor_acct_runs]
        doc["floor_with_accounting"] = {
            "all_idle": summary(fa_idle),
            "job_done": summary([f.job_done for f in floor_acct_runs]),
            "phases_median": median_of_dicts([f.phases for f in floor_acct_runs]),
        }
        if acct_runs:  # the default configuration against the same work done by a plain script
            ratios["in_service_with_accounting"] = figure(
                statistics.median(a.in_service for a in acct_runs) / statistics.median(fa_idle), "ratio",
                TARGET_RATIO_DEFAULT)
            ratios["job_done_with_accounting"] = figure(
                statistics.median(a.job_done for a in acct_runs)
                / statistics.median(f.job_done for f in floor_acct_runs), "ratio")
    return doc
