"""Unit tests of the local provider's pure parts (no root needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmpod.providers.base import SetupError
from slurmpod.providers.local.layout import bridge_name, netns_name, veth_name
from slurmpod.providers.local.netns import allocate_ip, choose_subnet
from slurmpod.providers.local.state import rewrite_hosts

ROUTES = [
    {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"},
    {"dst": "192.0.2.0/24", "dev": "eth0", "prefsrc": "192.0.2.2"},
]


def test_subnet_is_deterministic_and_inside_cidr() -> None:
    a = choose_subnet("10.231.0.0/16", "abcdefghijkl", set(), ROUTES)
    assert a == choose_subnet("10.231.0.0/16", "abcdefghijkl", set(), ROUTES)
    assert a.startswith("10.231.") and a.endswith(".0/24")


def test_subnet_skips_taken_and_other_slurmpod_bridges() -> None:
    first = choose_subnet("10.231.0.0/16", "c1", set(), ROUTES)
    second = choose_subnet("10.231.0.0/16", "c1", {first}, ROUTES)
    assert second != first
    routes = [*ROUTES, {"dst": first, "dev": "spotherclus"}]
    assert choose_subnet("10.231.0.0/16", "c1", set(), routes) != first


def test_subnet_refuses_overlapping_host_route() -> None:
    routes = [*ROUTES, {"dst": "10.0.0.0/8", "dev": "eth1"}]
    with pytest.raises(SetupError, match="--local-cidr"):
        choose_subnet("10.231.0.0/16", "c1", set(), routes)
    with pytest.raises(SetupError, match="--local-cidr"):
        choose_subnet("192.0.2.0/24", "c1", set(), ROUTES)


def test_subnet_exhaustion_is_temporary() -> None:
    from slurmpod.providers.base import TemporaryProviderError

    with pytest.raises(TemporaryProviderError):
        choose_subnet("10.9.9.0/24", "c1", {"10.9.9.0/24"}, ROUTES)


def test_allocate_ip_starts_at_10_and_does_not_reuse_early() -> None:
    ip, nxt = allocate_ip("10.231.5.0/24", set(), 10)
    assert ip == "10.231.5.10" and nxt == 11
    ip2, nxt2 = allocate_ip("10.231.5.0/24", {ip}, nxt)
    assert ip2 == "10.231.5.11"
    # .10 released, but allocation continues after the last one
    ip3, _ = allocate_ip("10.231.5.0/24", {ip2}, nxt2)
    assert ip3 == "10.231.5.12"


def test_names_fit_linux_limits() -> None:
    assert len(bridge_name("abcdefghijkl")) <= 15
    assert len(veth_name("10.231.255.253")) <= 15
    assert netns_name("abcdefghijkl", "i-0123456789abcdef0") == "sp-abcdefghijkl-9abcdef0"


def test_hosts_rewritten_in_place(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    rewrite_hosts(hosts, {"10.1.0.11": "ip-10-1-0-11"})
    inode = os.stat(hosts).st_ino
    rewrite_hosts(hosts, {"10.1.0.11": "ip-10-1-0-11", "10.1.0.10": "ip-10-1-0-10"})
    assert os.stat(hosts).st_ino == inode
    lines = hosts.read_text().splitlines()
    assert lines[-2:] == ["10.1.0.10 ip-10-1-0-10", "10.1.0.11 ip-10-1-0-11"]
