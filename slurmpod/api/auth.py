"""Who is calling: SigV4 (the default) or, on loopback only, everyone as the configured account."""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.requests import Request

from slurmpod.api.sigv4 import SignedRequest, SigV4Verifier
from slurmpod.security.credentials import CredentialStore
from slurmpod.service.clusters import Caller
from slurmpod.settings import Settings

log = logging.getLogger("slurmpod.auth")

Authenticator = Callable[[Request, bytes], Caller]


def signed_request(request: Request, body: bytes) -> SignedRequest:
    """The parts of a Starlette request SigV4 covers, exactly as they arrived on the wire."""
    scope = request.scope
    raw_path = scope.get("raw_path") or scope.get("path", "/").encode()
    path = bytes(raw_path).decode("latin-1").split("?", 1)[0] or "/"
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
    return SignedRequest(request.method, path, query, headers, body)


def make_authenticator(settings: Settings, store: CredentialStore | None = None) -> Authenticator:
    """``settings.auth``: ``sigv4`` verifies every request against the state dir's credentials; ``none``
    trusts every caller as ``settings.account_id`` (the CLI allows it on loopback only)."""
    if settings.auth == "none":
        log.warning("AUTHENTICATION DISABLED (--auth none): every request acts as account %s", settings.account_id)
        anyone = Caller(account_id=settings.account_id, region=settings.region)
        return lambda _request, _body: anyone
    if settings.auth != "sigv4":
        raise ValueError(f"unknown auth mode {settings.auth!r}")
    verifier = SigV4Verifier(settings.region, (store or CredentialStore(settings.state_dir)).lookup)

    def authenticate(request: Request, body: bytes) -> Caller:
        cred = verifier.verify(signed_request(request, body))
        return Caller(account_id=cred.account_id, region=settings.region)

    return authenticate
