"""How ``slurmpod server`` listens and stops: its socket (optionally shared by the servers of one machine through
SO_REUSEPORT) and uvicorn's graceful shutdown with the clusters handed over meanwhile."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from types import FrameType

import uvicorn

GRACEFUL_SECONDS = 30


def listening_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    """The API's TCP socket, bound now (so a taken port fails before anything starts) and listening only once
    uvicorn serves (a bound socket that does not listen gets no connections, not even of a shared port).
    ``reuse_port``: SO_REUSEPORT, so the servers of one machine share ``host:port`` and the kernel spreads new
    connections over those listening; one that restarts leaves the others serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    return sock


class GracefulServer(uvicorn.Server):
    """uvicorn's graceful SIGTERM/SIGINT (stop accepting, close idle connections, finish the requests in flight,
    at most ``GRACEFUL_SECONDS``), with this server's clusters handed over to the other servers *meanwhile*
    (``on_exit`` in a thread: the reconciler's in-flight work ends, the leases are released), not after the
    drain. uvicorn re-raises the signal once it is done: exit through ``cmd_server``'s ``finally``."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self._handing_over: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._handing_over is None:
            self._handing_over = threading.Thread(target=self._hand_over, name="slurmpod-hand-over", daemon=True)
            self._handing_over.start()

    def _hand_over(self) -> None:
        try:
            self._on_exit()
        except Exception:
            logging.getLogger("slurmpod").exception("handing the clusters over failed (their leases expire)")
