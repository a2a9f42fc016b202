"""EC2 instance metadata (IMDS) protocol, without sockets: one node's answers to parsed HTTP requests.

``ImdsNode.respond(method, target, headers)`` is the whole protocol (IMDSv2 tokens, v1, the v2-only mode, the
metadata tree, EC2's error pages); ``parse_head`` turns the bytes of a request head into its parts. The socket
side (one listener per node netns, one selector loop) lives in ``imds.py``.

What EC2 does and this follows:

* ``PUT /latest/api/token`` needs ``X-aws-ec2-metadata-token-ttl-seconds`` = 1..21600 (else 400) and refuses
  any request carrying ``X-Forwarded-For`` (403). The token is opaque text; the answer echoes the TTL header.
* A request with ``X-aws-ec2-metadata-token`` must carry a live token of *this* node (else 401). Without a
  token: allowed (IMDSv1) unless the node is v2-only (``http_tokens="required"``) -> 401.
* Values have no trailing newline; listings are one entry per line, directories with a trailing ``/``.
* Errors are EC2's small XHTML pages (``text/html``); everything else is ``text/plain``.
"""

from __future__ import annotations

import json
import platform
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

IMDS_ADDRESS = "169.254.169.254"
TTL_HEADER = "x-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "x-aws-ec2-metadata-token"
MAX_TTL = 21600
MAX_TOKENS = 1024  # per node; the oldest go first (a node asking for more than that gets its oldest ones expired)
DEFAULT_REGION = "us-east-1"
DEFAULT_ACCOUNT = "000000000000"
HTTP_TOKENS = ("optional", "required")

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 500: "Internal Server Error"}
_ERROR_PAGE = """<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>{code} - {reason}</title>
 </head>
 <body>
  <h1>{code} - {reason}</h1>
 </body>
</html>
"""


def _arch() -> str:
    machine = platform.machine()
    return {"aarch64": "arm64", "amd64": "x86_64"}.get(machine, machine)


@dataclass(frozen=True)
class NodeMetadata:
    """What one node's IMDS tells, read at request time (``ami-id`` follows root-volume replacements)."""

    instance_id: str
    instance_type: str  # "ml.c5.xlarge" or "c5.xlarge": IMDS shows it without "ml."
    image_id: str
    local_ipv4: str
    hostname: str
    mac: str = ""
    region: str = ""  # "" -> us-east-1
    availability_zone: str = ""  # "" -> <region>a
    account_id: str = ""  # "" -> 000000000000
    architecture: str = field(default_factory=_arch)

    @property
    def ec2_type(self) -> str:
        return self.instance_type.removeprefix("ml.")

    @property
    def effective_region(self) -> str:
        return self.region or DEFAULT_REGION

    @property
    def effective_az(self) -> str:
        return self.availability_zone or self.effective_region + "a"


def metadata_tree(md: NodeMetadata) -> dict[str, str]:
    """Every readable path below ``/latest/`` -> its value (directories are implied by the paths)."""
    tree = {
        "meta-data/ami-id": md.image_id,
        "meta-data/ami-launch-index": "0",
        "meta-data/hostname": md.hostname,
        "meta-data/instance-id": md.instance_id,
        "meta-data/instance-life-cycle": "on-demand",
        "meta-data/instance-type": md.ec2_type,
        "meta-data/local-hostname": md.hostname,
        "meta-data/local-ipv4": md.local_ipv4,
        "meta-data/placement/availability-zone": md.effective_az,
        "meta-data/placement/region": md.effective_region,
        "meta-data/services/domain": "amazonaws.com",
        "meta-data/services/partition": "aws",
        "dynamic/instance-identity/document": identity_document(md),
    }
    if md.mac:
        tree["meta-data/mac"] = md.mac
        nic = f"meta-data/network/interfaces/macs/{md.mac}/"
        tree.update({nic + "device-number": "0", nic + "local-hostname": md.hostname,
                     nic + "local-ipv4s": md.local_ipv4, nic + "mac": md.mac})
    return tree


def identity_document(md: NodeMetadata) -> str:
    """``/latest/dynamic/instance-identity/document`` as EC2 prints it (2-space indent, ``" : "``)."""
    doc = {
        "accountId": md.account_id or DEFAULT_ACCOUNT,
        "architecture": md.architecture,
        "availabilityZone": md.effective_az,
        "billingProducts": None,
        "devpayProductCodes": None,
        "marketplaceProductCodes": None,
        "imageId": md.image_id,
        "instanceId": md.instance_id,
        "instanceType": md.ec2_type,
        "kernelId": None,
        "privateIp": md.local_ipv4,
        "ramdiskId": None,
        "region": md.effective_region,
        "version": "2017-09-30",
    }
    return json.dumps(doc, indent=2, separators=(",", " : "))


def lookup(tree: Mapping[str, str], path: str) -> str | None:
    """The value or listing at ``path`` (relative to ``/latest/``, "" = the root), or None."""
    if path in tree:
        return tree[path]
    prefix = path.rstrip("/") + "/" if path.strip("/") else ""
    children: set[str] = set()
    for key in tree:
        if key.startswith(prefix):
            head, sep, _ = key[len(prefix):].partition("/")
            children.add(head + sep)
    if not children:
        return None
    return "\n".join(sorted(children))


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False  # close the connection after it (malformed request)

    def encode(self, *, head_only: bool = False, keep_alive: bool = True) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Error')}"]
        lines += [f"{k}: {v}" for k, v in self.headers]
        lines += [f"Content-Length: {len(self.body)}", "Server: EC2ws"]
        lines.append("Connection: " + ("keep-alive" if keep_alive and not self.close else "close"))
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")
        return head if head_only else head + self.body


def error(status: int, *, close: bool = False) -> Response:
    page = _ERROR_PAGE.format(code=status, reason=_REASONS[status]).encode()
    return Response(status, page, (("Content-Type", "text/html"),), close=close)


def text(body: str, *extra: tuple[str, str]) -> Response:
    return Response(200, body.encode(), (*extra, ("Content-Type", "text/plain"), ("Accept-Ranges", "none")))


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    version: str
    headers: dict[str, str]  # lower-case names

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        return conn != "close" if self.version == "HTTP/1.1" else conn == "keep-alive"


class BadRequest(ValueError):
    pass


def parse_head(raw: bytes) -> RequestHead:
    """The request line and headers of ``raw`` (without the blank line); ``BadRequest`` when malformed."""
    try:
        lines = raw.decode("iso-8859-1").split("\r\n")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes everything
        raise BadRequest(str(exc)) from exc
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"bad request line {lines[0]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"bad header line {line!r}")
        headers[name.lower()] = value.strip()
    return RequestHead(parts[0].upper(), parts[1], parts[2], headers)


class ImdsNode:
    """One node's metadata service: its tokens, its v1/v2 setting and where its values come from."""

    def __init__(self, instance_id: str, metadata_fn: Callable[[], NodeMetadata], http_tokens: str = "optional",
                 clock: Callable[[], float] = time.monotonic) -> None:
        if http_tokens not in HTTP_TOKENS:
            raise ValueError(f"http_tokens must be one of {HTTP_TOKENS}, not {http_tokens!r}")
        self.instance_id = instance_id
        self.metadata_fn = metadata_fn
        self.http_tokens = http_tokens
        self._clock = clock
        self._tokens: dict[str, float] = {}  # token -> expiry (clock); insertion order = age

    def issue_token(self, ttl: int) -> str:
        now = self._clock()
        self._tokens = {t: exp for t, exp in self._tokens.items() if exp > now}
        while len(self._tokens) >= MAX_TOKENS:
            del self._tokens[next(iter(self._tokens))]
        token = secrets.token_urlsafe(42)
        self._tokens[token] = now + ttl
        return token

    def token_ttl(self, token: str) -> int | None:
        """Seconds left for a live token of this node, else None."""
        exp = self._tokens.get(token)
        if exp is None:
            return None
        left = exp - self._clock()
        if left <= 0:
            del self._tokens[token]
            return None
        return max(1, int(left))

    def respond(self, method: str, target: str, headers: Mapping[str, str]) -> Response:
        """The answer to one request; ``headers`` with lower-case names."""
        path = target.split("?", 1)[0].split("#", 1)[0]
        if path == "/latest/api/token":
            if method != "PUT":
                return error(405)
            if "x-forwarded-for" in headers:
                return error(403)
            raw = headers.get(TTL_HEADER, "").strip()
            if not raw.isdigit() or not 1 <= int(raw) <= MAX_TTL:
                return error(400)
            ttl = int(raw)
            return text(self.issue_token(ttl), ("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", str(ttl)))
        if method not in ("GET", "HEAD"):
            return error(405)
        extra: tuple[tuple[str, str], ...] = ()
        if TOKEN_HEADER in headers:
            left = self.token_ttl(headers[TOKEN_HEADER].strip())
            if left is None:
                return error(401)
            extra = (("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", str(left)),)
        elif self.http_tokens == "required":
            return error(401)
        if path == "/":
            return text("latest", *extra)
        if path in ("/latest", "/latest/"):
            return text("dynamic\nmeta-data", *extra)
        if not path.startswith("/latest/") or "//" in path:
            return error(404)
        rel = path.removeprefix("/latest/")
        top = rel.split("/", 1)[0]
        if top not in ("meta-data", "dynamic"):
            return error(404)
        tree = metadata_tree(self.metadata_fn())
        value = lookup(tree, rel)
        if value is None and rel.endswith("/"):
            value = lookup(tree, rel.rstrip("/"))
        return error(404) if value is None else text(value, *extra)
