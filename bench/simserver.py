"""``python -m bench.simserver``: a slurmpod server on the SIMULATED provider that the benchmark can also
ask to time reconcile passes.

It is the same composition as ``slurmpod server --provider simulated`` (``build_server`` + uvicorn), in a
process of its own so its peak RSS is the server's alone. One extra: a thread reads commands on stdin and
answers one JSON line on stdout each:

* ``pass N``: runs ``server.reconciler.run_once()`` N times in that thread and answers the seconds of each
  pass (the background loop keeps running; an idle pass plans nothing, so the two do not interfere);
* ``stats``: answers the loop's own ``passes`` and ``last_pass_seconds`` and the process's VmHWM/VmRSS;
* ``quit``: stops the server.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.server import ACCOUNT


def proc_status_kib(pid: int | str, field: str) -> int:
    """A ``kB`` field of ``/proc/PID/status`` (VmHWM = peak RSS, VmRSS = current RSS); 0 if unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _answer(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve_commands(server: Any, stop: threading.Event) -> None:
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "pass":
            times = []
            for _ in range(int(words[1]) if len(words) > 1 else 1):
                t = time.perf_counter()
                server.reconciler.run_once()
                times.append(time.perf_counter() - t)
            _answer({"pass_seconds": times})
        elif words[0] == "stats":
            r = server.reconciler
            _answer({"passes": r.passes, "last_pass_seconds": r.last_pass_seconds,
                     "vm_hwm_kib": proc_status_kib("self", "VmHWM"), "vm_rss_kib": proc_status_kib("self", "VmRSS")})
        elif words[0] == "quit":
            _answer({"bye": True})
            break
        else:
            _answer({"error": f"unknown command {words[0]!r}"})
    stop.set()


def main(argv: list[str] | None = None) -> int:
    import logging

    import uvicorn

    from slurmpod.security.credentials import CredentialStore
    from slurmpod.server import build_server
    from slurmpod.settings import Settings

    p = argparse.ArgumentParser(prog="python -m bench.simserver", description=__doc__)
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--launch-delay", type=float, default=0.0)
    p.add_argument("--reconcile-interval", type=float, default=2.0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # as the CLI
    args.state_dir.mkdir(parents=True, exist_ok=True)
    CredentialStore(args.state_dir).get_or_create(ACCOUNT)
    settings = Settings(state_dir=args.state_dir, port=args.port, provider="simulated",
                        simulated_launch_delay=args.launch_delay, simulated_terminate_delay=0.0,
                        reconcile_interval=args.reconcile_interval)
    server = build_server(settings)
    server.start()
    uv = uvicorn.Server(uvicorn.Config(server.app, host="127.0.0.1", port=args.port, log_level="warning",
                                       access_log=False, loop="uvloop", http="httptools"))
    stop = threading.Event()
    threading.Thread(target=serve_commands, args=(server, stop), name="bench-commands", daemon=True).start()
    web = threading.Thread(target=uv.run, name="uvicorn", daemon=True)
    web.start()
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        uv.should_exit = True
        web.join(timeout=10)
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
