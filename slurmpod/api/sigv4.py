"""AWS Signature Version 4 verification, recomputed with botocore's own signer.

The server rebuilds the request the client signed (method, path, query, the headers named in
``SignedHeaders``, the body, ``X-Amz-Date``), asks ``botocore.auth.SigV4Auth`` for the canonical
request, string to sign and signature with the secret of the access key in the credential scope, and
compares with ``hmac.compare_digest``. Errors use AWS's codes and wording (403, except the malformed
header cases: 400 ``IncompleteSignatureException``).

Replay: like AWS, a signature is accepted again and again while its ``X-Amz-Date`` is within 5 minutes
of the server's clock; outside that window the time check rejects it. AWS does not remember
signatures, and neither does slurmpod (use TLS off loopback so requests cannot be captured).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
from botocore.awsrequest import AWSRequest, HTTPHeaders
from botocore.credentials import Credentials

from slurmpod import regions
from slurmpod.errors import (
    InvalidSignatureException,
    MissingAuthenticationToken,
    ServiceError,
    UnrecognizedClientException,
)
from slurmpod.security.credentials import Credential

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sagemaker"
SERVICES = ("sagemaker", "cloudtrail", "ssm")  # the signing names of the services this endpoint answers
MAX_SKEW = timedelta(minutes=5)
SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS Secret "
    "Access Key and signing method. Consult the service documentation for details."
)
INVALID_TOKEN = "The security token included in the request is invalid."


class IncompleteSignatureException(ServiceError):
    code = "IncompleteSignatureException"
    http_status = 400


@dataclass(frozen=True)
class SignedRequest:
    """What the verifier needs from an HTTP request (framework-neutral)."""

    method: str
    path: str  # raw path as sent, e.g. "/"
    query: str  # raw query string without "?"
    headers: Sequence[tuple[str, str]]  # every header, names in any case, repeats kept in order
    body: bytes

    def header(self, name: str) -> str | None:
        values = self.header_all(name)
        return values[0] if values else None

    def header_all(self, name: str) -> list[str]:
        lname = name.lower()
        return [v for k, v in self.headers if k.lower() == lname]


@dataclass(frozen=True)
class AuthorizationHeader:
    access_key_id: str
    date: str
    region: str
    service: str
    terminator: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> AuthorizationHeader:
    """``AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/sagemaker/aws4_request, SignedHeaders=a;b, Signature=…``."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise IncompleteSignatureException(f"Unsupported AWS 'algorithm': '{algorithm}'. Authorization={value}")
    params: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, val = part.strip().partition("=")
        if sep:
            params[key.strip()] = val.strip()
    missing = [f"Authorization header requires '{name}' parameter."
               for name in ("Credential", "Signature", "SignedHeaders") if not params.get(name)]
    if missing:
        raise IncompleteSignatureException(" ".join(missing) + f" Authorization={value}")
    scope = params["Credential"].split("/")
    if len(scope) != 5 or not all(scope):
        raise IncompleteSignatureException(
            f"Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term, "
            f"got '{params['Credential']}'")
    signed = tuple(params["SignedHeaders"].lower().split(";"))
    if any(not h for h in signed):
        raise IncompleteSignatureException(
            f"Malformed SignedHeaders '{params['SignedHeaders']}'. Authorization={value}")
    sig = params["Signature"].lower()
    if len(sig) != 64 or any(c not in "0123456789abcdef" for c in sig):
        raise IncompleteSignatureException(f"Malformed Signature '{params['Signature']}'. Authorization={value}")
    return AuthorizationHeader(scope[0], scope[1], scope[2], scope[3], scope[4], signed, sig)


class _ReplaySigner(SigV4Auth):
    """botocore's signer, fed exactly the headers the client said it signed (nothing dropped or added)."""

    def __init__(self, credentials: Credentials, service: str, region: str, signed: HTTPHeaders) -> None:
        super().__init__(credentials, service, region)
        self._signed = signed

    def headers_to_sign(self, request: AWSRequest) -> HTTPHeaders:
        return self._signed


@functools.lru_cache(maxsize=256)
def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """SigV4's derived key (botocore's ``SigV4Auth.signature`` steps); the same for a key's whole day."""
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _fast_signature(req: SignedRequest, auth: AuthorizationHeader, secret: str, amz_date: str) -> str | None:
    """``compute_signature`` for the requests the SDKs send (path ``/``, no query, header values without line
    breaks), built the way botocore builds it but without its request objects; None: any other request, which
    botocore itself then signs. ``tests/api/test_sigv4_fast.py`` checks both agree."""
    if req.path != "/" or req.query:
        return None
    values: dict[str, list[str]] = {}
    wanted = set(auth.signed_headers)
    for k, v in req.headers:
        name = k.lower()
        if name in wanted:
            if "\r" in v or "\n" in v:
                return None
            values.setdefault(name, []).append(v)
    names = sorted(values)  # a signed header the request lacks is left out, as botocore's replay leaves it
    if not names:
        return None
    canonical_headers = "".join(f"{n}:{','.join(' '.join(v.split()) for v in values[n])}\n" for n in names)
    claimed = values.get("x-amz-content-sha256")
    payload = claimed[-1] if claimed else hashlib.sha256(req.body).hexdigest()
    canonical = "\n".join((req.method.upper(), "/", "", canonical_headers, ";".join(names), payload))
    scope = f"{amz_date[0:8]}/{auth.region}/{auth.service}/aws4_request"
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode('utf-8')).hexdigest()}"
    key = _signing_key(secret, amz_date[0:8], auth.region, auth.service)
    return hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def compute_signature(req: SignedRequest, auth: AuthorizationHeader, secret: str, amz_date: str) -> str:
    """The signature botocore computes for ``req`` with ``secret`` (hex)."""
    fast = _fast_signature(req, auth, secret, amz_date)
    if fast is not None:
        return fast
    return botocore_signature(req, auth, secret, amz_date)


def botocore_signature(req: SignedRequest, auth: AuthorizationHeader, secret: str, amz_date: str) -> str:
    """The signature of ``req`` from botocore's own signer, fed exactly the headers the client signed."""
    signed = HTTPHeaders()
    for name in auth.signed_headers:
        for value in req.header_all(name):
            signed[name] = value
    url = "http://slurmpod" + req.path + (f"?{req.query}" if req.query else "")  # http: payload always hashed
    request = AWSRequest(method=req.method, url=url, data=req.body, headers=dict(signed.items()))
    request.context["timestamp"] = amz_date
    signer = _ReplaySigner(Credentials(auth.access_key_id, secret), auth.service, auth.region, signed)
    canonical = signer.canonical_request(request)
    return str(signer.signature(signer.string_to_sign(request, canonical), request))


_BASIC_TIMESTAMP = re.compile(r"\d{8}T\d{6}Z")


def _parse_timestamp(amz_date: str) -> datetime:
    """``strptime(amz_date, SIGV4_TIMESTAMP)`` (UTC), without strptime's cost for the one shape the SDKs send."""
    if _BASIC_TIMESTAMP.fullmatch(amz_date) and amz_date.isascii():
        d = amz_date
        return datetime(int(d[0:4]), int(d[4:6]), int(d[6:8]), int(d[9:11]), int(d[11:13]), int(d[13:15]),
                        tzinfo=UTC)
    return datetime.strptime(amz_date, SIGV4_TIMESTAMP).replace(tzinfo=UTC)


def _check_time(amz_date: str, now: datetime) -> None:
    try:
        when = _parse_timestamp(amz_date)
    except ValueError:
        raise IncompleteSignatureException(
            f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'. See http://en.wikipedia.org/wiki/ISO_8601"
        ) from None
    fmt = SIGV4_TIMESTAMP
    if when < now - MAX_SKEW:
        raise InvalidSignatureException(
            f"Signature expired: {amz_date} is now earlier than {(now - MAX_SKEW).strftime(fmt)} "
            f"({now.strftime(fmt)} - 5 min.)")
    if when > now + MAX_SKEW:
        raise InvalidSignatureException(
            f"Signature not yet current: {amz_date} is still later than {(now + MAX_SKEW).strftime(fmt)} "
            f"({now.strftime(fmt)} + 5 min.)")


@dataclass(frozen=True)
class Verified:
    """A good signature: the key that made it and the scope it was made for."""

    credential: Credential
    region: str
    service: str


def scope_key_id(req: SignedRequest) -> str | None:
    """The access key id a request claims (for the audit trail of a refused request), or None."""
    try:
        value = req.header("authorization")
        return parse_authorization(value).access_key_id if value else None
    except ServiceError:
        return None


class SigV4Verifier:
    """Authenticates requests against a credential lookup (``CredentialStore.lookup``), in every region AWS's naming
    allows (``slurmpod.regions``); ``services``: the signing names accepted (the first is named in the error)."""

    def __init__(self, lookup: Callable[[str], Credential | None], services: Sequence[str] = (SERVICE,),
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.lookup = lookup
        self.services = tuple(services)
        self.now = now

    def verify(self, req: SignedRequest) -> Verified:
        """The credential that signed ``req`` and its scope; raises the AWS error otherwise.

        A regional endpoint host (``api.sagemaker.<region>.amazonaws.com``, e.g. behind a DNS alias) must match the
        scope's region, as on AWS."""
        value = req.header("authorization")
        if value is None or not value.strip():
            if req.header("x-amz-date") or "X-Amz-Signature=" in req.query:
                raise IncompleteSignatureException(
                    "Authorization header requires 'Credential' parameter. Authorization header requires "
                    "'Signature' parameter. Authorization header requires 'SignedHeaders' parameter. "
                    "Authorization=")
            raise MissingAuthenticationToken("Missing Authentication Token")
        auth = parse_authorization(value)
        amz_date = req.header("x-amz-date")
        if not amz_date:
            raise IncompleteSignatureException(
                f"Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header. "
                f"Authorization={value}")
        cred = self.lookup(auth.access_key_id)
        if cred is None:
            raise UnrecognizedClientException(INVALID_TOKEN)
        _check_time(amz_date, self.now())
        if amz_date[:8] != auth.date:
            raise InvalidSignatureException(
                f"Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
                f"'{auth.date}' != '{amz_date[:8]}', from '{amz_date}'.")
        host_region = regions.region_from_host(req.header("host"))
        if not regions.is_region(auth.region) or (host_region is not None and host_region != auth.region):
            raise InvalidSignatureException(
                f"Credential should be scoped to a valid region, not '{auth.region}'. ")
        if auth.service not in self.services:
            raise InvalidSignatureException(
                f"Credential should be scoped to correct service: '{self.services[0]}'. ")
        if auth.terminator != "aws4_request":
            raise InvalidSignatureException(
                f"Credential should be scoped with a valid terminator: 'aws4_request', not '{auth.terminator}'. ")
        if "host" not in auth.signed_headers:
            raise InvalidSignatureException("'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.")
        claimed = req.header("x-amz-content-sha256")
        if "x-amz-content-sha256" in auth.signed_headers and claimed != hashlib.sha256(req.body).hexdigest():
            raise InvalidSignatureException(SIGNATURE_MISMATCH)  # never let a header unbind the body
        expected = compute_signature(req, auth, cred.secret_access_key, amz_date)
        if not hmac.compare_digest(expected, auth.signature):
            raise InvalidSignatureException(SIGNATURE_MISMATCH)
        return Verified(cred, auth.region, auth.service)
