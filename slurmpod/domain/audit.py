"""The audit trail's record (one API call or console action) and the pure rules that keep secrets out of it.

A record keeps the columns CloudTrail's LookupEvents filters on (event name, source, access key, user name, read
only, resources, account, region, time) and ``detail``: the whole CloudTrail-shaped record as a JSON string, built
by the API layer after ``scrub`` removed every secret and cut every large value.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

HIDDEN = "HIDDEN_DUE_TO_SECURITY_REASONS"  # CloudTrail's own placeholder for sensitive values
SOURCE = "sagemaker.amazonaws.com"
CONSOLE_SOURCE = "signin.amazonaws.com"
DEFAULT_RETENTION_DAYS = 90  # CloudTrail's event history
MAX_STRING = 1024  # longer strings are cut
MAX_ITEMS = 100  # longer lists are cut
MAX_DEPTH = 12
# a key whose name says it holds a secret is hidden whatever its shape (password, secret, token, credential, key
# material); ``...Arn``/``...Id`` names only point at a secret and are kept (``SecretArn``, ``AccessKeyId``), as are
# pagination and idempotency tokens
_SECRET_KEY = re.compile(r"(?i)(passw(or)?d|secret|token|credential|private.?key|session.?key)")
_POINTER_KEY = re.compile(r"(?i)(arn|id|name|nexttoken|clienttoken)$")


@dataclass(frozen=True)
class AuditRecord:
    event_id: str
    event_time: float
    event_name: str
    event_source: str
    account_id: str  # "" when the caller could not be tied to an account (unknown key)
    region: str
    access_key_id: str
    username: str
    read_only: bool
    resources: tuple[tuple[str, str], ...]  # (ResourceType, ResourceName)
    error_code: str | None
    detail: str  # the CloudTrail record (JSON), secrets already removed
    seq: int = 0  # insertion order, set by the store


@functools.lru_cache(maxsize=4096)  # the same few member names, in every record
def is_secret_key(name: str) -> bool:
    return bool(_SECRET_KEY.search(name)) and not _POINTER_KEY.search(name)


def is_read_only(event_name: str) -> bool:
    return event_name.startswith(("Describe", "List", "Get", "Lookup"))


def scrub(value: Any, *, sensitive: frozenset[str] = frozenset(), _depth: int = 0) -> Any:
    """A copy of ``value`` with every secret hidden and every large value cut: keys named like a secret, keys in
    ``sensitive`` (the service model's sensitive members) and anything nested deeper than ``MAX_DEPTH``."""
    if _depth > MAX_DEPTH:
        return "...(nested too deeply)"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in list(value.items())[:MAX_ITEMS]:
            key = str(k)[:MAX_STRING]
            hidden = key in sensitive or is_secret_key(key)
            out[key] = HIDDEN if hidden else scrub(v, sensitive=sensitive, _depth=_depth + 1)
        if len(value) > MAX_ITEMS:
            out["..."] = f"{len(value) - MAX_ITEMS} more keys cut"
        return out
    if isinstance(value, list | tuple):
        items = [scrub(v, sensitive=sensitive, _depth=_depth + 1) for v in list(value)[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"...({len(value) - MAX_ITEMS} more items cut)")
        return items
    if isinstance(value, str) and len(value) > MAX_STRING:
        return value[:MAX_STRING] + f"...({len(value) - MAX_STRING} more characters cut)"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)[:MAX_STRING]


def camel(value: Any) -> Any:
    """CloudTrail's spelling of request parameters: ``InstanceGroups`` -> ``instanceGroups``, nested."""
    if isinstance(value, Mapping):
        return {(k[:1].lower() + k[1:] if isinstance(k, str) else k): camel(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel(v) for v in value]
    return value
