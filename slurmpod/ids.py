"""Identifiers: cluster ids and ARNs, instance ids, event ids, hostnames."""

from __future__ import annotations

import re
import secrets
import uuid

from slurmpod.regions import arn_partition

_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
ARN_RE = re.compile(r"^arn:aws[a-z\-]*:sagemaker:([a-z0-9\-]*):([0-9]{12}):cluster/([a-z0-9]{12})$")


def new_cluster_id() -> str:
    """12 lowercase alphanumerics, as in HyperPod cluster ARNs."""
    return "".join(secrets.choice(_ALNUM) for _ in range(12))


def cluster_arn(region: str, account: str, cluster_id: str) -> str:
    return f"arn:{arn_partition(region)}:sagemaker:{region}:{account}:cluster/{cluster_id}"


def parse_cluster_arn(value: str) -> tuple[str, str, str] | None:
    """Returns (region, account, cluster_id) for a cluster ARN, else None."""
    m = ARN_RE.match(value)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def new_instance_id() -> str:
    """``i-`` followed by 17 hex digits."""
    return "i-" + secrets.token_hex(9)[:17]


def new_event_id() -> str:
    return str(uuid.uuid4())


def new_operation_id() -> str:
    return str(uuid.uuid4())


def new_image_id() -> str:
    return "ami-" + secrets.token_hex(9)[:17]


def hostname_for_ip(ip: str) -> str:
    """HyperPod's node hostname: ``ip-10-1-2-3`` for 10.1.2.3."""
    return "ip-" + ip.replace(".", "-")
