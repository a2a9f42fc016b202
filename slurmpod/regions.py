"""AWS region names, from botocore's own partition data (``botocore/data/partitions.json``).

A region is valid when it matches the ``regionRegex`` of one of botocore's partitions (``aws``: ``^(us|eu|ap|sa|
ca|me|af|il|mx)\\-\\w+\\-\\d+$``, ``aws-cn``, ``aws-us-gov``, the ISO partitions, ...) and is written in lowercase
letters, digits and dashes. That admits every region AWS has today (ap-northeast-1, us-gov-west-1, cn-north-1,
eu-isoe-west-1, ...) and the ones it will open under the same naming, and refuses names of another shape
(``moon-1``, ``AP-NORTHEAST-1``, ``aws-global``). A cluster's ARN carries its region's partition
(``arn:aws-cn:sagemaker:cn-north-1:...``).
"""

from __future__ import annotations

import functools
import re

import botocore.loaders

DEFAULT_REGION = "us-east-1"
REGION_SETTING = "server.region"  # settings key: the running server's --region, the CLI tools' default
_LOWER = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")
# regional endpoint host names clients send: sagemaker.<r>.amazonaws.com, api.sagemaker.<r>.amazonaws.com,
# cloudtrail.<r>.amazonaws.com, ssm.<r>.amazonaws.com (and .amazonaws.com.cn / FIPS variants)
_HOST = re.compile(
    r"^(?:api\.)?(?:sagemaker|cloudtrail|ssm)(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


@functools.cache
def _partitions() -> tuple[tuple[str, re.Pattern[str]], ...]:
    data = botocore.loaders.create_loader().load_data("partitions")
    return tuple((p["id"], re.compile(p["regionRegex"])) for p in data["partitions"])


def partition_of(region: str) -> str | None:
    """The partition (``aws``, ``aws-cn``, ``aws-us-gov``, ...) whose naming ``region`` follows, else None."""
    if not _LOWER.fullmatch(region):
        return None
    for partition, pattern in _partitions():
        if pattern.match(region):
            return partition
    return None


def is_region(name: str) -> bool:
    return partition_of(name) is not None


def arn_partition(region: str) -> str:
    return partition_of(region) or "aws"


def region_from_host(host: str | None) -> str | None:
    """The region a regional endpoint host name names (``api.sagemaker.ap-northeast-1.amazonaws.com:443`` ->
    ``ap-northeast-1``); None for any other host (``127.0.0.1:8080``)."""
    if not host:
        return None
    name = host.strip().lower()
    if name.startswith("["):  # IPv6 literal
        return None
    name = name.rsplit(":", 1)[0] if ":" in name else name
    m = _HOST.match(name)
    return m.group("region") if m else None


@functools.cache
def known_regions() -> tuple[str, ...]:
    """Every region botocore's partition data lists (for pickers), sorted."""
    data = botocore.loaders.create_loader().load_data("partitions")
    names = {r for p in data["partitions"] for r in p.get("regions", {}) if is_region(r)}
    return tuple(sorted(names))
