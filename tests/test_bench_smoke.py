"""The benchmark cannot rot: ``python -m bench --quick`` end to end (all five scenarios, real daemons), plus
its pure parts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from bench import moto_compare, scale_local, sim_scale, sw_update
from bench.cli import render_figures, render_table
from bench.jobs import ProbeError, parse_probe
from bench.memory import NodeMemory, node_memory
from bench.seed_local import result_doc
from bench.serverlog import milestones
from bench.stats import figure, median_of_dicts, summary, targets

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("slurmctld", "slurmd", "munged", "nsenter", "unshare", "ip", "sbatch", "moto_server")


def _local_ok() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [t for t in TOOLS if shutil.which(t, path=path) is None]
    return f"missing {', '.join(missing)}" if missing else None


def _is_figure(fig: object, *, with_target: bool = False) -> bool:
    if not isinstance(fig, dict) or not isinstance(fig.get("value"), int | float) or not fig.get("unit"):
        return False
    if with_target:
        return isinstance(fig.get("target"), int | float) and isinstance(fig.get("met"), bool)
    return True


def _check_summary(s: dict, *, target: bool = False) -> None:
    assert _is_figure(s["median"], with_target=target), s
    assert _is_figure(s["min"]) and _is_figure(s["max"])
    assert s["min"]["value"] <= s["median"]["value"] <= s["max"]["value"]
    assert all(x > 0 for x in s["samples"])


def _cleanup_state_dirs(root: Path) -> None:
    """``slurmpod cleanup`` for every state dir (slurmpod's or the floor's) a bench left below ``root``."""
    from slurmpod.providers.local.cleanup import cleanup, find_leftovers

    for local in (p for pattern in ("*/local", "*/*/local", "*/*/*/local") for p in root.glob(pattern)):
        state = local.parent
        if local.is_dir() and find_leftovers(state):
            cleanup(state)


@pytest.mark.integration
def test_bench_quick_writes_results(tmp_path: Path) -> None:
    reason = _local_ok()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "results.json"
    try:
        proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(out), "--workdir",
                               str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    finally:  # a bench killed by the timeout never reaches its own teardown: nothing it booted may stay running
        _cleanup_state_dirs(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    datetime.fromisoformat(doc["date"])
    assert doc["quick"] is True
    m = doc["machine"]
    assert m["nproc"] >= 1 and m["memory_gib"] > 0 and m["kernel"] and "22." in (m["slurm_version"] or "")
    sc = doc["scenarios"]["seed_local"]
    assert sc["runs"] == 1
    _check_summary(sc["slurmpod"]["in_service"], target=True)
    _check_summary(sc["slurmpod"]["job_done"], target=True)
    assert sc["slurmpod"]["in_service"]["median"]["target"] == 3.0
    assert sc["slurmpod"]["job_done"]["median"]["target"] == 8.0
    for key in ("sbatch_to_completed", "connect_overhead", "delete_to_gone"):
        _check_summary(sc["slurmpod"][key])
    _check_summary(sc["floor"]["all_idle"])
    _check_summary(sc["floor"]["job_done"])
    assert _is_figure(sc["ratios"]["in_service"], with_target=True)
    assert sc["ratios"]["in_service"]["target"] == 3.0
    assert "cluster InService" in sc["slurmpod"]["server_log_milestones_median"]
    assert set(sc["floor"]["phases_median"]) >= {"all_idle", "job_done"}
    assert doc["all_targets_met"] == all(f["met"] for f in targets(doc))
    assert "create -> all idle" in proc.stdout
    sc = doc["scenarios"]
    assert set(sc) == {"seed_local", "software_update", "scale_local", "sim_scale", "moto_compare"}
    _check_summary(sc["software_update"]["one_node"]["done"], target=True)
    assert sc["software_update"]["rolling"]["batch"] == 2
    _check_summary(sc["scale_local"]["slurmpod"]["in_service"], target=True)
    assert sc["scale_local"]["slurmpod"]["nodes_counted"] == sc["scale_local"]["compute_nodes"] + 1
    assert sc["scale_local"]["floor"]["nodes_counted"] == sc["scale_local"]["compute_nodes"] + 1
    assert sc["scale_local"]["slurmpod"]["pss_per_node"]["value"] > 0
    for key in ("in_service", "pagination", "idle_pass", "peak_rss"):
        assert _is_figure(sc["sim_scale"][key], with_target=True), key
    assert _is_figure(sc["moto_compare"]["ratio"], with_target=True)
    assert sc["moto_compare"]["slurmpod_rps"]["value"] > 0 and sc["moto_compare"]["moto_rps"]["value"] > 0
    # everything was cleaned up: no state dir left under the workdir, no namespaces of ours
    assert not list(tmp_path.glob("slurmpod-bench-*"))
    assert str(tmp_path) not in Path("/proc/mounts").read_text()


def test_figure_and_summary() -> None:
    assert figure(2.5, "s", 3.0) == {"value": 2.5, "unit": "s", "target": 3.0, "met": True}
    assert figure(3.2, "s", 3.0)["met"] is False
    assert "target" not in figure(1.0)
    s = summary([3.0, 1.0, 2.0], target=2.5)
    assert s["median"] == {"value": 2.0, "unit": "s", "target": 2.5, "met": True}
    assert (s["min"]["value"], s["max"]["value"]) == (1.0, 3.0)
    assert median_of_dicts([{"a": 1.0, "b": 5.0}, {"a": 3.0}]) == {"a": 2.0, "b": 5.0}
    assert len(targets({"x": [s, {"y": figure(1, "ratio", 3)}]})) == 2


def test_parse_probe() -> None:
    ok = parse_probe(0, "PROBE 7 COMPLETED 100.0 102.5\n", "")
    assert ok.job_id == "7" and ok.sbatch_to_completed == pytest.approx(2.5)
    with pytest.raises(ProbeError, match="FAILED"):
        parse_probe(1, "PROBE 7 FAILED 100.0 101.0\n", "")
    with pytest.raises(ProbeError, match="sbatch: error"):
        parse_probe(2, "", "sbatch: error: invalid partition")


def test_milestones_from_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("old line before the offset\n")
    offset = log.stat().st_size
    t0 = datetime(2026, 1, 2, 3, 4, 5).timestamp()
    with log.open("a") as f:
        f.write(
            "2026-01-02 03:04:05,100 INFO slurmpod.reconciler: cluster c1: 1 new instance(s) in controller-group\n"
            "2026-01-02 03:04:06,000 INFO slurmpod.reconciler: node i-0abc (controller-group ip-10-0-0-1): "
            "Pending -> Running\n"
            "2026-01-02 03:04:07,250 INFO slurmpod.reconciler: cluster c1: Creating -> InService\n"
            "2026-01-02 03:04:07,300 INFO slurmpod.reconciler: cluster other: Creating -> InService\n")
    got = milestones(log, offset, "c1", t0)
    assert got == {"instances recorded (controller-group)": 0.1, "last node Running (controller-group)": 1.0,
                   "cluster InService": 2.25}


def test_result_doc_and_table() -> None:
    from bench.api_run import ApiRun
    from bench.floor import FloorRun

    api = [ApiRun(2.0, 5.0, 3.0, 0.5, 0.2, {"cluster InService": 2.0}),
           ApiRun(2.4, 5.5, 3.1, 0.5, 0.2, {"cluster InService": 2.4})]
    floor = [FloorRun(0.5, 3.5, 3.0, {"all_idle": 0.5}), FloorRun(0.7, 3.7, 3.0, {"all_idle": 0.7})]
    doc = result_doc(api, floor)
    assert doc["ratios"]["in_service"] == {"value": 3.667, "unit": "ratio", "target": 3.0, "met": False}
    assert doc["slurmpod"]["in_service"]["median"]["met"] is True
    table = render_table(doc)
    assert "create -> first job COMPLETED" in table and "MISSED" in table


def test_figure_lower_bound_and_render() -> None:
    assert figure(1.2, "ratio", 1.0, at_least=True) == {"value": 1.2, "unit": "ratio", "target": 1.0, "met": True,
                                                        "bound": "min"}
    assert figure(0.8, "ratio", 1.0, at_least=True)["met"] is False
    text = render_figures({"a": {"median": figure(2.0, "s", 3.0), "min": figure(1.0)}, "r": figure(0.5, "ratio", 1.0,
                                                                                                   at_least=True)})
    assert "a " in text and "<= 3: met" in text and ">= 1: MISSED" in text and "min" not in text


def test_scenario_docs() -> None:
    sizes = [{"nodes": 1000, "in_service": 3.0, "pagination": 0.1, "pages": 10, "idle_pass_ms": [1.0],
              "idle_pass_median_ms": 1.0, "delete_to_gone": 1.0},
             {"nodes": 10000, "in_service": 31.0, "pagination": 0.7, "pages": 100, "idle_pass_ms": [2.0],
              "idle_pass_median_ms": 2.0, "delete_to_gone": 9.0}]
    d = sim_scale.result_doc(sizes, 150.0)
    assert d["in_service"]["met"] is False and d["pagination"]["met"] is True
    assert d["idle_pass_ratio_big_small"]["value"] == 2.0 and d["peak_rss"]["met"] is True
    m = moto_compare.result_doc([450.0, 470.0], [290.0, 300.0], 10, [2.0, 3.0], [4.0, 4.0])
    assert m["ratio"]["met"] is True and m["slurmpod_rps"]["value"] == 460.0
    assert m["slurmpod_server_cpu_per_request"]["value"] == 2.5
    assert moto_compare.result_doc([300.0], [290.0], 10)["ratio"]["met"] is False  # issue 21: >= 1.5 x moto
    u = sw_update.result_doc([sw_update.UpdateRun(1, 1, 0.2, 1.5)], [sw_update.UpdateRun(4, 2, 0.3, 4.0)])
    assert u["one_node"]["done"]["median"]["met"] is True and u["rolling"]["nodes"] == 4
    mem = NodeMemory(nodes=2, total_pss_kib=4096, per_command_kib={"slurmd": 4096})
    assert mem.per_node_mib == 2.0
    s = scale_local.result_doc(50, [10.0], [mem], [80.0], [5.0], [mem])
    assert s["ratios"]["in_service"]["value"] == 2.0 and s["slurmpod"]["in_service"]["median"]["met"] is True
    assert sim_scale.scale_groups(10000)[0]["InstanceCount"] == 1
    assert sum(g["InstanceCount"] for g in sim_scale.scale_groups(10000)) == 10000


def test_node_memory_ignores_other_processes() -> None:
    assert node_memory(os.getpid()).nodes == 0  # this process started no nodes


def test_repeat_merge_reports_median_and_spread() -> None:
    from bench.repeat import merge, spread_text

    runs = [{"a": figure(v, "s", 2.0), "r": figure(v, "ratio", 1.5, at_least=True), "n": k, "l": [figure(v, "s")]}
            for k, v in enumerate((3.0, 1.0, 2.0))]
    doc = merge(runs)
    assert doc["a"]["value"] == 2.0 and doc["a"]["met"] is True
    assert doc["a"]["spread"] == {"min": 1.0, "max": 3.0, "values": [3.0, 1.0, 2.0]}
    assert doc["r"]["met"] is True and doc["n"] == 0 and doc["l"][0]["value"] == 2.0
    assert spread_text(doc["a"]) == "  (1-3, 3 runs)" and spread_text(figure(1.0, "s")) == ""
