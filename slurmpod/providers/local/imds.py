"""Instance metadata at 169.254.169.254 inside every local node, served from the slurmpod process.

``ImdsServer.attach`` puts ``169.254.169.254/32`` on the node netns's ``lo`` and creates the node's listener
socket *inside* that netns: a short-lived thread enters it with ``setns(CLONE_NEWNET)``, creates and binds the
socket, and goes back. A socket keeps the netns it was created in, so:

* the listener is reachable only from that node (``ip route get 169.254.169.254`` there is ``local ... dev lo``:
  no packet ever reaches ``eth0``, the bridge or the host), and the socket a request arrives on *is* the node's
  identity (source addresses are not trusted; tokens are per node);
* the serving process stays outside the node's PID and mount namespaces: the node can neither see nor kill it,
  and the listener is close-on-exec, so no node process inherits it;
* the host netns gets no 169.254 address, no listener and no firewall rule.

All listeners and connections are served by **one** selector thread (``slurmpod-imds``), whatever the number
of nodes; the protocol itself is ``imds_protocol.ImdsNode``. ``metadata_fn`` is called per request, so values
such as ``ami-id`` follow the node's record without re-attaching; the MAC is read from the node's ``eth0`` at
request time (``SIOCGIFHWADDR`` on the listener, which sits in the node's netns).
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import fcntl
import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from slurmpod.providers.base import TemporaryProviderError
from slurmpod.providers.local.commands import host_run
from slurmpod.providers.local.imds_protocol import (
    HTTP_TOKENS,
    IMDS_ADDRESS,
    BadRequest,
    ImdsNode,
    NodeMetadata,
    Response,
    error,
    parse_head,
)

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
SIOCGIFHWADDR = 0x8927
MAX_HEAD = 8192  # bytes of request line + headers
MAX_BODY = 8192  # IMDS requests have no body; a small one is read and ignored
MAX_CONNECTIONS = 32  # per node
IDLE_TIMEOUT = 10.0  # seconds a connection may sit without finishing a request
LINGER = 2.0  # seconds a connection answered with "Connection: close" is drained before it is closed
BIND_TIMEOUT = 10.0
NETNS_CHECK = 5.0  # seconds between checks that every attached node's netns still exists

_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    """``setns(fd, CLONE_NEWNET)`` for the calling thread only (os.setns exists from Python 3.12 on)."""
    native = getattr(os, "setns", None)
    if native is not None:
        native(fd, CLONE_NEWNET)
        return
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def interface_mac(sock: socket.socket, name: str = "eth0") -> str:
    """MAC of interface ``name`` in the netns ``sock`` was created in ("" if there is none)."""
    try:
        ifreq = fcntl.ioctl(sock.fileno(), SIOCGIFHWADDR, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return ""
    return ":".join(f"{b:02x}" for b in ifreq[18:24])


def bind_in_netns(netns_path: str | Path, address: str, port: int) -> socket.socket:
    """A non-blocking listening TCP socket bound to ``address:port`` inside the netns at ``netns_path``.

    The work runs on a dedicated thread (``setns`` changes only the calling thread's netns); whatever happens,
    that thread ends, so no thread of this process is ever left inside a node's netns.
    """
    box: dict[str, socket.socket | BaseException] = {}

    def work() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            target = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((address, port))
                    sock.listen(64)
                    sock.setblocking(False)
                except BaseException:
                    sock.close()
                    raise
                box["sock"] = sock
            finally:
                try:
                    _setns(own)
                except OSError as exc:  # the thread ends right after: nothing else runs in that netns
                    log.warning("imds: could not return from netns %s: %s", netns_path, exc)
        except BaseException as exc:
            box["error"] = exc
        finally:
            os.close(own)

    thread = threading.Thread(target=work, name="slurmpod-imds-bind", daemon=True)
    thread.start()
    thread.join(BIND_TIMEOUT)
    result = box.get("sock")
    if isinstance(result, socket.socket):
        return result
    exc = box.get("error")
    if isinstance(exc, BaseException):
        raise TemporaryProviderError(f"imds: cannot listen on {address}:{port} in {netns_path}: {exc}") from exc
    raise TemporaryProviderError(f"imds: binding in {netns_path} timed out")


def ensure_imds_address(netns_path: str | Path, address: str = IMDS_ADDRESS) -> None:
    """``lo`` up with ``address/32`` in the netns (idempotent; ``addr replace``)."""
    host_run(["nsenter", f"--net={netns_path}", "--", "ip", "-batch", "-"], timeout=15,
             input=f"link set lo up\naddr replace {address}/32 dev lo\n")


@dataclasses.dataclass(eq=False)
class _Listener:
    node: ImdsNode
    sock: socket.socket
    netns_path: str
    netns_inode: int
    conns: set[_Conn] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(eq=False)
class _Conn:
    sock: socket.socket
    listener: _Listener
    inbuf: bytearray = dataclasses.field(default_factory=bytearray)
    outbuf: bytearray = dataclasses.field(default_factory=bytearray)
    last: float = dataclasses.field(default_factory=time.monotonic)
    close_after: bool = False
    half_closed: bool = False  # answered and shut for writing; reading what the client still sends


class ImdsServer:
    """IMDS for many nodes: one listener per node netns, all served by one selector thread."""

    def __init__(self, *, address: str = IMDS_ADDRESS, port: int = 80) -> None:
        self.address = address
        self.port = port
        self._lock = threading.Lock()
        self._listeners: dict[str, _Listener] = {}  # touched only on the loop thread
        self._commands: collections.deque[tuple[Callable[[], object], threading.Event, list[object]]] = (
            collections.deque())
        self._sel: selectors.BaseSelector | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

    # ------------------------------------------------------------------ public API

    def attach(self, instance_id: str, netns_path: str | Path, metadata_fn: Callable[[], NodeMetadata], *,
               http_tokens: str = "optional") -> None:
        """Serves ``instance_id``'s metadata inside the netns at ``netns_path``. Idempotent: attaching again
        (same netns) only takes the new ``metadata_fn``/``http_tokens`` and keeps the node's tokens."""
        try:
            inode = os.stat(netns_path).st_ino
        except OSError as exc:
            raise TemporaryProviderError(f"imds: no netns at {netns_path}") from exc
        if http_tokens not in HTTP_TOKENS:
            raise ValueError(f"http_tokens must be one of {HTTP_TOKENS}, not {http_tokens!r}")
        ensure_imds_address(netns_path, self.address)
        if self._run(lambda: self._update(instance_id, inode, metadata_fn, http_tokens)):
            return
        sock = bind_in_netns(netns_path, self.address, self.port)
        self.serve_socket(instance_id, sock, metadata_fn, http_tokens=http_tokens, netns_path=str(netns_path),
                          netns_inode=inode)

    def serve_socket(self, instance_id: str, sock: socket.socket, metadata_fn: Callable[[], NodeMetadata], *,
                     http_tokens: str = "optional", netns_path: str = "", netns_inode: int = 0) -> None:
        """Serves ``instance_id`` on ``sock``, an already listening socket (``attach`` binds it in the node's
        netns; tests pass a loopback one). The server owns ``sock`` from now on, also when this fails."""
        try:
            node = ImdsNode(instance_id, _with_mac(metadata_fn, sock), http_tokens)
            sock.setblocking(False)
            listener = _Listener(node, sock, netns_path, netns_inode)
            self._run(lambda: self._add(instance_id, listener))
        except BaseException:
            sock.close()
            raise

    def detach(self, instance_id: str) -> None:
        """Closes the node's listener and connections (idempotent). Its netns can then really go away."""
        if self._thread is not None:
            self._run(lambda: self._remove(instance_id))

    def attached(self) -> list[str]:
        """Instance ids currently served."""
        if self._thread is None:
            return []
        ids = self._run(lambda: sorted(self._listeners))
        return list(ids) if isinstance(ids, list) else []

    def close(self) -> None:
        """Stops serving every node and ends the thread."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._stopping = True
        self._wakeup()
        thread.join(10)
        with self._lock:
            self._thread = None
            self._stopping = False

    # ------------------------------------------------------------------ loop-thread commands

    def _update(self, instance_id: str, inode: int, metadata_fn: Callable[[], NodeMetadata],
                http_tokens: str) -> bool:
        current = self._listeners.get(instance_id)
        if current is None:
            return False
        if current.netns_inode != inode:  # the netns was recreated: the old socket is in a dead netns
            self._remove(instance_id)
            return False
        current.node.metadata_fn = _with_mac(metadata_fn, current.sock)
        current.node.http_tokens = http_tokens
        return True

    def _add(self, instance_id: str, listener: _Listener) -> None:
        self._remove(instance_id)
        assert self._sel is not None
        self._sel.register(listener.sock, selectors.EVENT_READ, listener)
        self._listeners[instance_id] = listener

    def _remove(self, instance_id: str) -> None:
        listener = self._listeners.pop(instance_id, None)
        if listener is None:
            return
        for conn in list(listener.conns):
            self._close_conn(conn)
        self._unregister(listener.sock)
        listener.sock.close()

    # ------------------------------------------------------------------ the loop

    def _run(self, fn: Callable[[], object]) -> object:
        """Runs ``fn`` on the loop thread (starting it if needed) and returns its result."""
        self._start()
        done = threading.Event()
        box: list[object] = []
        self._commands.append((fn, done, box))
        self._wakeup()
        if not done.wait(30):
            raise TemporaryProviderError("imds: the serving thread does not answer")
        if box and isinstance(box[0], BaseException):
            raise box[0]
        return box[0] if box else None

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._sel = selectors.DefaultSelector()
            self._wake = socket.socketpair()
            for s in self._wake:
                s.setblocking(False)
            self._sel.register(self._wake[0], selectors.EVENT_READ, None)
            self._thread = threading.Thread(target=self._loop, name="slurmpod-imds", daemon=True)
            self._thread.start()

    def _wakeup(self) -> None:
        wake = self._wake
        if wake is not None:
            try:
                wake[1].send(b"x")
            except (BlockingIOError, OSError):
                pass

    def _loop(self) -> None:
        sel, wake = self._sel, self._wake
        assert sel is not None and wake is not None
        next_sweep = time.monotonic() + 1.0
        next_netns_check = time.monotonic() + NETNS_CHECK
        try:
            while not self._stopping:
                for key, mask in sel.select(timeout=1.0):
                    try:
                        self._dispatch(key.data, mask, wake[0])
                    except Exception:  # one bad connection must not stop every node's IMDS
                        log.exception("imds: error while serving")
                        if isinstance(key.data, _Conn):
                            self._close_conn(key.data)
                self._drain_commands()
                now = time.monotonic()
                if now >= next_sweep:
                    next_sweep = now + 1.0
                    self._sweep(now)
                if now >= next_netns_check:
                    next_netns_check = now + NETNS_CHECK
                    self._drop_vanished()
        finally:
            for iid in list(self._listeners):
                self._remove(iid)
            self._drain_commands()
            sel.close()
            for s in wake:
                s.close()
            if self._sel is sel:
                self._sel, self._wake = None, None
            while self._commands:  # nobody serves them any more
                _, done, box = self._commands.popleft()
                box.append(TemporaryProviderError("imds: the server was closed"))
                done.set()

    def _drain_commands(self) -> None:
        while self._commands:
            fn, done, box = self._commands.popleft()
            try:
                box.append(fn())
            except BaseException as exc:
                box.append(exc)
            done.set()

    def _dispatch(self, data: object, mask: int, wake_r: socket.socket) -> None:
        if data is None:
            try:
                while wake_r.recv(512):
                    pass
            except BlockingIOError:
                pass
        elif isinstance(data, _Listener):
            self._accept(data)
        elif isinstance(data, _Conn):
            if mask & selectors.EVENT_READ:
                self._read(data)
            if mask & selectors.EVENT_WRITE and data.sock.fileno() >= 0:
                self._flush(data)

    def _accept(self, listener: _Listener) -> None:
        assert self._sel is not None
        for _ in range(16):
            try:
                sock, _addr = listener.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("imds: accept failed for %s: %s", listener.node.instance_id, exc)
                return
            if len(listener.conns) >= MAX_CONNECTIONS:
                sock.close()
                continue
            sock.setblocking(False)
            conn = _Conn(sock, listener)
            listener.conns.add(conn)
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(16384)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close_conn(conn)
            return
        if conn.close_after:
            return  # whatever follows a request answered with "Connection: close" is read and dropped
        conn.last = time.monotonic()
        conn.inbuf += data
        self._process(conn)
        self._flush(conn)

    def _process(self, conn: _Conn) -> None:
        """Answers every complete request in ``conn.inbuf`` (in order; pipelining allowed)."""
        while not conn.close_after:
            end = conn.inbuf.find(b"\r\n\r\n")
            if end < 0:
                if len(conn.inbuf) > MAX_HEAD:
                    self._queue(conn, error(400, close=True), head_only=False, keep_alive=False)
                return
            try:
                head = parse_head(bytes(conn.inbuf[:end]))
                length = _content_length(head.headers)
            except BadRequest:
                self._queue(conn, error(400, close=True), head_only=False, keep_alive=False)
                return
            if len(conn.inbuf) < end + 4 + length:
                return  # the body is still coming
            del conn.inbuf[:end + 4 + length]
            try:
                resp = conn.listener.node.respond(head.method, head.target, head.headers)
            except Exception:
                log.exception("imds: metadata of %s failed", conn.listener.node.instance_id)
                resp = error(500)
            self._queue(conn, resp, head_only=head.method == "HEAD", keep_alive=head.keep_alive)

    @staticmethod
    def _queue(conn: _Conn, resp: Response, *, head_only: bool, keep_alive: bool) -> None:
        conn.outbuf += resp.encode(head_only=head_only, keep_alive=keep_alive)
        if resp.close or not keep_alive:
            conn.close_after = True

    def _flush(self, conn: _Conn) -> None:
        assert self._sel is not None
        if conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf)
                del conn.outbuf[:sent]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._close_conn(conn)
                return
        if not conn.outbuf and conn.close_after:
            # Lingering close: a close() with unread input would send a RST that can destroy the answer
            # before the client reads it. Shut for writing and drain until the client closes (or goes idle).
            if not conn.half_closed:
                conn.half_closed = True
                try:
                    conn.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    self._close_conn(conn)
                    return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        if self._sel.get_key(conn.sock).events != events:
            self._sel.modify(conn.sock, events, conn)

    def _sweep(self, now: float) -> None:
        for listener in self._listeners.values():
            for conn in list(listener.conns):
                if now - conn.last > (LINGER if conn.half_closed else IDLE_TIMEOUT):
                    self._close_conn(conn)

    def _drop_vanished(self) -> None:
        """Detaches nodes whose netns is gone (removed behind our back, e.g. by ``slurmpod cleanup`` or another
        provider object): the socket would otherwise keep a dead netns alive in the kernel."""
        for iid, listener in list(self._listeners.items()):
            if not listener.netns_path:
                continue
            try:
                same = os.stat(listener.netns_path).st_ino == listener.netns_inode
            except OSError:
                same = False
            if not same:
                log.info("imds: netns of %s is gone, detaching", iid)
                self._remove(iid)

    def _close_conn(self, conn: _Conn) -> None:
        conn.listener.conns.discard(conn)
        if conn.sock.fileno() >= 0:
            self._unregister(conn.sock)
            conn.sock.close()

    def _unregister(self, sock: socket.socket) -> None:
        if self._sel is not None and sock.fileno() >= 0:
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass


def _with_mac(metadata_fn: Callable[[], NodeMetadata], sock: socket.socket) -> Callable[[], NodeMetadata]:
    """``metadata_fn`` with ``mac`` filled from the node's ``eth0`` when it leaves it empty."""

    def current() -> NodeMetadata:
        md = metadata_fn()
        return md if md.mac else dataclasses.replace(md, mac=interface_mac(sock))

    return current


def _content_length(headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers:
        raise BadRequest("chunked bodies are not accepted")
    raw = headers.get("content-length", "0").strip() or "0"
    if not raw.isdigit() or int(raw) > MAX_BODY:
        raise BadRequest(f"bad Content-Length {raw!r}")
    return int(raw)
