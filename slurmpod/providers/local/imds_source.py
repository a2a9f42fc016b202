"""Where a local node's instance metadata comes from: its instance record (``meta.json``), read per request.

The record carries what the provider knows (instance id and type, address, hostname, image id, updated by
``replace_root_volume``) plus ``InstanceRequest.metadata`` as given by the reconciler:

* ``region`` (default ``us-east-1``), ``availability-zone`` (default ``<region>a``), ``account-id``;
* ``http-tokens``: ``optional`` (default: IMDSv1 and v2) or ``required`` (v2 only, as EC2's ``HttpTokens``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from slurmpod.providers.base import PermanentProviderError
from slurmpod.providers.local.imds_protocol import HTTP_TOKENS, NodeMetadata
from slurmpod.providers.local.state import InstanceRecord

log = logging.getLogger(__name__)

METADATA_KEYS = ("region", "availability-zone", "account-id", "http-tokens")


def node_metadata(rec: InstanceRecord) -> NodeMetadata:
    extra = rec.metadata
    return NodeMetadata(instance_id=rec.instance_id, instance_type=rec.instance_type, image_id=rec.image_id,
                        local_ipv4=rec.ip, hostname=rec.hostname, region=extra.get("region", ""),
                        availability_zone=extra.get("availability-zone", ""), account_id=extra.get("account-id", ""))


def record_metadata(meta: Path, rec: InstanceRecord) -> Callable[[], NodeMetadata]:
    """A ``metadata_fn`` reading ``meta`` at each call (the last readable version if it vanished or is bad)."""
    last = [rec]

    def current() -> NodeMetadata:
        try:
            fresh = InstanceRecord.load(meta)
        except (OSError, ValueError, TypeError) as exc:
            log.debug("imds: cannot read %s: %s", meta, exc)
            fresh = None
        if fresh is not None:
            last[0] = fresh
        return node_metadata(last[0])

    return current


def http_tokens(rec: InstanceRecord) -> str:
    value = rec.metadata.get("http-tokens", "optional")
    if value not in HTTP_TOKENS:
        raise PermanentProviderError(f"metadata http-tokens must be one of {', '.join(HTTP_TOKENS)}, not {value!r}")
    return value
