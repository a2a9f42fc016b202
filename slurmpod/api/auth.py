"""Who is calling: SigV4 (the default) or, on loopback only, everyone as the configured account.

The region of a call is its signature's credential scope (any region AWS's naming allows, ``slurmpod.regions``):
clusters live in the region they were created in. With ``--auth none`` the scope is read without being verified
(the SDKs sign anyway), else the region of a regional endpoint host name, else the server's ``--region``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.requests import Request

from slurmpod import regions
from slurmpod.api.sigv4 import SERVICES, SignedRequest, SigV4Verifier, parse_authorization, scope_key_id
from slurmpod.errors import ServiceError
from slurmpod.security.credentials import CredentialStore
from slurmpod.service.clusters import Caller
from slurmpod.settings import Settings

log = logging.getLogger("slurmpod.auth")


@dataclass(frozen=True)
class Principal:
    """An authenticated caller and the service its signature was made for (None: not known, ``--auth none``)."""

    caller: Caller
    service: str | None = None


def signed_request(request: Request, body: bytes) -> SignedRequest:
    """The parts of a Starlette request SigV4 covers, exactly as they arrived on the wire."""
    scope = request.scope
    raw_path = scope.get("raw_path") or scope.get("path", "/").encode()
    path = bytes(raw_path).decode("latin-1").split("?", 1)[0] or "/"
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
    return SignedRequest(request.method, path, query, headers, body)


def _unverified_region(req: SignedRequest, default: str) -> str:
    value = req.header("authorization")
    if value:
        try:
            region = parse_authorization(value).region
        except ServiceError:
            region = ""
        if regions.is_region(region):
            return region
    return regions.region_from_host(req.header("host")) or default


class Authenticator:
    """``settings.auth``: ``sigv4`` verifies every request against the state dir's credentials; ``none``
    trusts every caller as ``settings.account_id`` (the CLI allows it on loopback only)."""

    def __init__(self, settings: Settings, store: CredentialStore | None = None) -> None:
        if settings.auth not in ("sigv4", "none"):
            raise ValueError(f"unknown auth mode {settings.auth!r}")
        self.settings = settings
        self.store = store or CredentialStore(settings.state_dir)
        self.verifier = SigV4Verifier(self.store.lookup, SERVICES)
        if settings.auth == "none":
            log.warning("AUTHENTICATION DISABLED (--auth none): every request acts as account %s",
                        settings.account_id)

    def __call__(self, request: Request, body: bytes) -> Principal:
        req = signed_request(request, body)
        if self.settings.auth == "none":
            region = _unverified_region(req, self.settings.region)
            return Principal(Caller(self.settings.account_id, region, access_key_id=scope_key_id(req) or ""))
        ok = self.verifier.verify(req)
        caller = Caller(ok.credential.account_id, ok.region, access_key_id=ok.credential.access_key_id)
        return Principal(caller, ok.service)

    def claimed(self, request: Request) -> tuple[str | None, str | None, str]:
        """(access key id, its account, region) a refused request claimed, for the audit trail: the account
        only when the key exists (a refused call is shown to the key's owner, as CloudTrail does)."""
        req = signed_request(request, b"")
        akid = scope_key_id(req)
        if self.settings.auth == "none":
            return akid, self.settings.account_id, _unverified_region(req, self.settings.region)
        cred = self.store.lookup(akid) if akid else None
        return akid, (cred.account_id if cred else None), _unverified_region(req, self.settings.region)


def make_authenticator(settings: Settings, store: CredentialStore | None = None) -> Authenticator:
    return Authenticator(settings, store)
