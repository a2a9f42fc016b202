"""Console sign-in and sessions: access keys verified against the credential store, sessions kept server-side.

The browser holds only a random session id (``secrets.token_urlsafe(32)``) in an HttpOnly, SameSite=Strict
cookie scoped to ``/console``; everything else (the account, the access key, the CSRF token) stays in this
process. Sessions end on sign-out, after ``idle`` seconds without a request, after ``lifetime`` seconds in
any case, and as soon as their access key is deleted (``slurmpod credentials delete``).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slurmpod.security.credentials import CredentialStore
from slurmpod.service.clusters import Caller

COOKIE = "slurmpod_console"
PRE_COOKIE = "slurmpod_console_signin"  # double-submit CSRF token of the sign-in form (before any session)


@dataclass
class Session:
    session_id: str
    access_key_id: str
    caller: Caller
    csrf_token: str
    created: float
    last_seen: float
    flash: list[tuple[str, str]] = field(default_factory=list)  # (level, message) shown once


class SignIn:
    """Checks an access key id + secret; ``still_valid`` is asked on every request of a session."""

    def __init__(self, verify: Callable[[str, str], Caller | None], still_valid: Callable[[str], bool],
                 account_of: Callable[[str], str | None] = lambda _akid: None) -> None:
        self.verify = verify
        self.still_valid = still_valid
        self.account_of = account_of  # the account of an access key id (a failed sign-in's audit record)


def credential_sign_in(store: CredentialStore, region: str) -> SignIn:
    """Sign-in with the API's access keys (``<state-dir>/auth/credentials.json``); constant-time compare."""

    def verify(access_key_id: str, secret: str) -> Caller | None:
        cred = store.lookup(access_key_id.strip())
        given = secret.strip().encode()
        if cred is None:
            hmac.compare_digest(given, b"x" * 40)  # same work for unknown keys
            return None
        if not hmac.compare_digest(given, cred.secret_access_key.encode()):
            return None
        return Caller(account_id=cred.account_id, region=region, access_key_id=cred.access_key_id)

    def account_of(akid: str) -> str | None:
        cred = store.lookup(akid.strip()) if akid.strip() else None
        return cred.account_id if cred else None

    return SignIn(verify, lambda akid: store.lookup(akid) is not None, account_of)


def open_sign_in(account_id: str, region: str) -> SignIn:
    """``--auth none`` (loopback experiments): any key signs in as ``account_id``, like the API."""
    return SignIn(lambda akid, _secret: Caller(account_id=account_id, region=region, access_key_id=akid.strip()),
                  lambda _akid: True, lambda _akid: account_id)


class SessionStore:
    """Thread-safe in-memory sessions (a restart signs everyone out, which is fine for a console)."""

    def __init__(self, *, idle: float = 3600.0, lifetime: float = 12 * 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.idle = idle
        self.lifetime = lifetime
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def create(self, access_key_id: str, caller: Caller) -> Session:
        now = self.clock()
        s = Session(secrets.token_urlsafe(32), access_key_id, caller, secrets.token_urlsafe(32), now, now)
        with self._lock:
            self._expire(now)
            self._sessions[s.session_id] = s
        return s

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        now = self.clock()
        with self._lock:
            s = self._sessions.get(session_id)
            if s is None:
                return None
            if now - s.last_seen > self.idle or now - s.created > self.lifetime:
                del self._sessions[session_id]
                return None
            s.last_seen = now
            return s

    def drop(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)

    def _expire(self, now: float) -> None:
        dead = [k for k, s in self._sessions.items()
                if now - s.last_seen > self.idle or now - s.created > self.lifetime]
        for k in dead:
            del self._sessions[k]


def same_token(expected: str, given: str | None) -> bool:
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())
