"""``python -m bench [--scenario N ...] [--runs N] [--quick] [--out PATH] [--node-image default|builtin|AMI]``: run
the benchmarks, print the figures with their targets, write JSON. Scenarios 1 and 3 boot every node, slurmpod's
and the floor's, from the same image: the image store's default root filesystem unless ``--node-image`` says
otherwise (systemd nodes; ``builtin`` is the legacy host-root image).

Scenarios: 1 seed topology on local (vs floor), 2 software update (root-volume replacement), 3 50 nodes on
local (vs floor, memory per node), 4 10,000 simulated nodes, 5 API throughput vs moto, 6 image build with a warm
apt cache (not part of ``--quick`` unless asked for with ``--scenario 6``: a build takes ~45 s), 7 the seed on the
Slurm 24.11 image (trixie) against the Slurm 22.05 image (bookworm), side by side (not part of ``--quick``)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from bench import (
    containers,
    deep_health,
    image_build,
    moto_compare,
    multi_server,
    resilience,
    scale_local,
    seed_local,
    sim_scale,
    slurm_releases,
    sw_update,
)
from bench.machine import machine_info
from bench.repeat import merge, spread_text
from bench.stats import targets

DEFAULT_OUT = Path(__file__).resolve().parent / "results.json"
SCENARIOS = {1: seed_local.NAME, 2: sw_update.NAME, 3: scale_local.NAME, 4: sim_scale.NAME, 5: moto_compare.NAME,
             6: image_build.NAME, 7: slurm_releases.NAME, 8: deep_health.NAME, 9: resilience.NAME,
             10: multi_server.NAME, 11: containers.NAME}
NOT_QUICK = {6, 7, 8, 9, 10, 11}  # --quick without --scenario skips these


def _span(s: dict[str, Any]) -> str:
    return f"{s['median']['value']:6.2f} ({s['min']['value']:.2f}-{s['max']['value']:.2f})"


def _met(fig: dict[str, Any]) -> str:
    if "target" not in fig:
        return ""
    return f"<= {fig['target']:g} {'met' if fig['met'] else 'MISSED'}"


def render_table(scenario: dict[str, Any]) -> str:
    """Medians (min-max) of slurmpod and floor, the ratios and the targets, as a text table."""
    sp, fl, ratio = scenario["slurmpod"], scenario["floor"], scenario["ratios"]
    rows = [
        ("create -> all idle (InService)", sp["in_service"], fl["all_idle"], ratio["in_service"]),
        ("create -> first job COMPLETED", sp["job_done"], fl["job_done"], ratio["job_done"]),
    ]
    head = f"{'seconds, median (min-max)':<32} {'slurmpod':>20} {'floor':>20} {'ratio':>7}  target (slurmpod; ratio)"
    lines = [head, "-" * len(head)]
    for label, a, b, r in rows:
        lines.append(f"{label:<32} {_span(a):>20} {_span(b):>20} {r['value']:7.2f}  "
                     f"{_met(a['median'])}{'; ' + _met(r) if 'target' in r else ''}")
    lines.append(f"{'sbatch -> COMPLETED (in node)':<32} {_span(sp['sbatch_to_completed']):>20} "
                 f"{_span(fl['sbatch_to_completed']):>20}")
    lines.append(f"{'slurmpod connect overhead':<32} {_span(sp['connect_overhead']):>20}")
    lines.append(f"{'DeleteCluster -> gone':<32} {_span(sp['delete_to_gone']):>20}")
    acct, facct = scenario.get("slurmpod_with_accounting"), scenario.get("floor_with_accounting")
    if acct:  # the default configuration (slurmdbd + MariaDB host), against the floor with the same host
        for label, key, fkey, rkey in (("with accounting: InService", "in_service", "all_idle",
                                        "in_service_with_accounting"),
                                       ("with accounting: job COMPLETED", "job_done", "job_done",
                                        "job_done_with_accounting")):
            fl_span = _span(facct[fkey]) if facct else "(not run)"
            r = ratio.get(rkey)
            r_text = f"{r['value']:7.2f}" if r else f"{'':7}"
            lines.append(f"{label:<32} {_span(acct[key]):>20} {fl_span:>20} {r_text}  "
                         f"{_met(acct[key]['median'])}{'; ' + _met(r) if r and 'target' in r else ''}")
    on_off = ratio.get("accounting_on_off")
    if on_off:
        lines.append(f"{'InService accounting on / off':<32} {_span(acct['in_service']):>20} "
                     f"{_span(sp['in_service']):>20} {on_off['value']:7.2f}  {_met(on_off)}")
    lines.append("slurmpod server-log milestones (median s after CreateCluster): " + ", ".join(
        f"{k} {v:.2f}" for k, v in sp["server_log_milestones_median"].items()))
    lines.append("floor phases (median s after t0): " + ", ".join(
        f"{k} {v:.2f}" for k, v in fl["phases_median"].items()))
    if facct:
        lines.append("floor with accounting phases (median s after t0): " + ", ".join(
            f"{k} {v:.2f}" for k, v in facct["phases_median"].items()))
    img = scenario.get("node_image")
    if img:
        lines.append(f"nodes (both sides): image {img['id']} ({img['kind']}"
                     f"{', systemd as PID 1' if img['systemd'] else ', legacy host root, no systemd'})")
    return "\n".join(lines)


def _figures(doc: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(path, figure) of every figure in ``doc``, except the min/max of summaries."""
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(doc, dict):
        if "value" in doc and "unit" in doc:
            return [(path, doc)]
        for k, v in doc.items():
            if k in ("min", "max", "samples"):
                continue
            out += _figures(v, f"{path}.{k}" if path else k)
    return out


def render_figures(scenario: dict[str, Any]) -> str:
    """Every figure of a scenario: value, unit, and target with met/MISSED."""
    lines = []
    for path, fig in _figures(scenario):
        label = path.replace(".median", "")
        target = ""
        if "target" in fig:
            op = ">=" if fig.get("bound") == "min" else "<="
            target = f"  target {op} {fig['target']:g}: {'met' if fig['met'] else 'MISSED'}"
        lines.append(f"  {label:<44} {fig['value']:>10.3f} {fig['unit']:<6}{target}{spread_text(fig)}")
    return "\n".join(lines)


def _terminate(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through every cleanup `finally`


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--scenario", type=int, action="append", choices=sorted(SCENARIOS),
                   help="run only this scenario (repeatable; default: all)")
    p.add_argument("--runs", type=int, default=5,
                   help="runs of each side in scenario 1 (default 5; scenarios 2, 3 use at most 3)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run the selected scenarios N times, interleaved, and report every figure as the median "
                        "of the N runs with its spread (min-max); targets apply to that median")
    p.add_argument("--quick", action="store_true",
                   help="every scenario once at small size (smoke check, < 90 s)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results JSON (default {DEFAULT_OUT})")
    p.add_argument("--reconcile-interval", type=float, default=None,
                   help="pass --reconcile-interval to the server (default: the server's default; diagnosis only)")
    p.add_argument("--workdir", type=Path, default=None, help="parent of the temporary state dirs (default: /tmp)")
    p.add_argument("--node-image", default="default", metavar="default|bookworm|trixie|builtin|AMI",
                   help="image of every node in scenarios 1 and 3, slurmpod's (`slurmpod server --node-image`) and "
                        "the floor's: default (the image store's default root filesystem, systemd nodes), "
                        "builtin (the legacy host-root nodes) or an ami-id of the image store")
    return p


def _run_scenario(number: int, args: argparse.Namespace, runs: int) -> dict[str, Any]:
    """One run of scenario ``number`` (its figures, plus ``seconds``)."""
    few = 1 if args.quick else min(runs, 3)
    t = time.monotonic()
    if number == 1:
        scenario = seed_local.run(runs, args.workdir, reconcile_interval=args.reconcile_interval,
                                  node_image=args.node_image,
                                  floor_accounting=not args.quick)  # --quick stays under 90 s without it
    elif number == 2:
        scenario = sw_update.run(few, args.workdir, quick=args.quick)
    elif number == 3:
        scenario = scale_local.run(few, args.workdir, quick=args.quick, node_image=args.node_image)
    elif number == 4:
        scenario = sim_scale.run(args.quick, args.workdir)
    elif number == 6:
        scenario = image_build.run(min(few, 2), args.workdir)
    elif number == 7:
        scenario = slurm_releases.run(runs, args.workdir)
    elif number == 8:
        scenario = deep_health.run(few, args.workdir)
    elif number == 9:
        scenario = resilience.run(min(few, 3), args.workdir)
    elif number == 10:
        scenario = multi_server.run(args.quick, args.workdir)
    elif number == 11:
        scenario = containers.run(few, args.workdir)
    else:
        scenario = moto_compare.run(args.quick, args.workdir)
    scenario["seconds"] = round(time.monotonic() - t, 1)
    return scenario


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    runs = 1 if args.quick else args.runs
    if runs < 1:
        print("bench: --runs must be at least 1", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    doc: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench", *(sys.argv[1:] if argv is None else argv)]),
        "quick": args.quick,
        "machine": machine_info(),
        "scenarios": {},
    }
    if args.repeat < 1:
        print("bench: --repeat must be at least 1", file=sys.stderr)
        return 2
    numbers = args.scenario or [n for n in sorted(SCENARIOS) if not (args.quick and n in NOT_QUICK)]
    repeats: dict[str, list[dict[str, Any]]] = {}
    for rep in range(args.repeat):  # interleaved: every scenario sees the same stretch of the machine's noise
        for number in numbers:
            name = SCENARIOS[number]
            print(f"\n=== scenario {number}: {name}" + (f" (run {rep + 1}/{args.repeat})" if args.repeat > 1 else ""))
            repeats.setdefault(name, []).append(_run_scenario(number, args, runs))
    for name, docs in repeats.items():
        doc["scenarios"][name] = merge(docs) if len(docs) > 1 else docs[0]
        if len(docs) > 1:
            doc["scenarios"][name]["repeat"] = len(docs)
            doc["scenarios"][name]["seconds"] = round(sum(d["seconds"] for d in docs), 1)
    doc["total_seconds"] = round(time.monotonic() - started, 1)
    figs = targets(doc)
    doc["all_targets_met"] = all(f["met"] for f in figs)
    for name, scenario in doc["scenarios"].items():
        print(f"\n--- {name}")
        if name == seed_local.NAME:
            print(render_table(scenario))
        else:
            print(render_figures(scenario))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nall targets met: {doc['all_targets_met']}; wrote {args.out} ({doc['total_seconds']} s)")
    return 0
