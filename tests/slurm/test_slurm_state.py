"""Parsing of real ``sinfo --json`` output captured from Debian's Slurm 22.05.8 (tests/slurm/samples)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurmpod.slurm.state import SlurmNode, node_from_json, parse_scontrol_nodes_json, parse_sinfo_json

SAMPLES = Path(__file__).with_name("samples")


def _load(name: str) -> list[SlurmNode]:
    return parse_sinfo_json((SAMPLES / name).read_text())


def test_idle_nodes() -> None:
    nodes = _load("sinfo_idle.json")
    assert [n.name for n in nodes] == ["ip-10-239-77-11", "ip-10-239-77-12", "ip-10-239-77-13"]
    n = nodes[0]
    assert n.states == frozenset({"IDLE", "DYNAMIC_NORM"})
    assert n.addr == "10.239.77.11"
    assert n.features == ("compute",)
    assert n.partitions == ("dev", "compute")
    assert (n.cpus, n.real_memory) == (2, 1000)
    assert n.reason is None
    assert n.is_idle() and n.is_joined()
    assert not (n.is_allocated() or n.is_drained() or n.is_down())
    assert nodes[2].features == ("gpu",) and nodes[2].partitions == ("dev", "gpu")


def test_mixed_drain_down() -> None:
    busy, draining, down = _load("sinfo_mixed_states.json")
    assert busy.states == frozenset({"MIXED", "DYNAMIC_NORM"})
    assert busy.is_allocated() and busy.is_joined() and not busy.is_idle()
    assert draining.states == frozenset({"MIXED", "DRAIN", "DYNAMIC_NORM"})
    assert draining.reason == "slurmpod: draining test"
    assert draining.is_draining() and not draining.is_drained() and draining.is_joined()
    assert down.is_down() and not down.is_joined()
    assert down.reason == "slurmpod: down test"


def _node(state: str, flags: list[str]) -> SlurmNode:
    return node_from_json({"name": "n", "state": state, "state_flags": flags, "reason": "", "partitions": []})


@pytest.mark.parametrize(
    ("state", "flags", "joined", "drained"),
    [
        ("idle", [], True, False),
        ("idle", ["NOT_RESPONDING"], False, False),  # idle* right after a resume
        ("idle", ["DRAIN"], True, True),
        ("allocated", ["COMPLETING"], True, False),
        ("down", ["DRAIN", "NOT_RESPONDING"], False, True),
        ("unknown", [], False, False),
        ("idle", ["POWERED_DOWN"], False, False),
        # seen on 22.05: Gres=gpu:8 advertised by a node without GPUs
        ("idle", ["DRAIN", "DYNAMIC_NORM", "INVALID_REG"], False, True),
    ],
)
def test_predicates(state: str, flags: list[str], joined: bool, drained: bool) -> None:
    n = _node(state, flags)
    assert n.is_joined() is joined
    assert n.is_drained() is drained


def test_errors_and_alias() -> None:
    with pytest.raises(ValueError):
        parse_sinfo_json(json.dumps({"errors": [{"error": "boom"}], "nodes": []}))
    assert parse_scontrol_nodes_json(json.dumps({"nodes": []})) == []
