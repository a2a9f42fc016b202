"""/metrics: Prometheus text format, parsed with prometheus_client's parser, checked after a scenario."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from slurmpod.settings import Settings
from tests.serverproc import ROLE, RunningServer, free_port, seed_groups, thread_server, wait_status

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[RunningServer]:
    settings = Settings(state_dir=tmp_path / "s", port=free_port(), provider="simulated", reconcile_interval=0.1,
                        simulated_launch_delay=0.3, simulated_capacity={"ml.p5.48xlarge": 0})
    with thread_server(settings) as s:
        yield s


def scrape(srv: RunningServer) -> Samples:
    r = requests.get(f"{srv.endpoint}/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_after_a_scenario(srv: RunningServer) -> None:
    before = scrape(srv)
    assert value(before, "slurmpod_clusters", status="InService") == 0
    assert ("slurmpod_nodes", (("status", "Running"),)) in before  # every status is exported, also at 0
    c = srv.client()
    c.create_cluster(ClusterName="m1", InstanceGroups=seed_groups(2))
    during = scrape(srv)
    assert value(during, "slurmpod_operations_in_flight", operation="CreateCluster") == 1
    assert value(during, "slurmpod_clusters", status="Creating") == 1
    wait_status(c, "m1", {"InService"})

    # a launch that fails for lack of capacity: the cluster rolls back and fails
    groups = seed_groups(1)
    groups[1] = {**groups[1], "InstanceType": "ml.p5.48xlarge", "ExecutionRole": ROLE}
    c.create_cluster(ClusterName="m2", InstanceGroups=groups)
    wait_status(c, "m2", {"Failed"})
    with pytest.raises(c.exceptions.ResourceNotFound):
        c.describe_cluster(ClusterName="missing")

    after = scrape(srv)
    assert value(after, "slurmpod_clusters", status="InService") == 1
    assert value(after, "slurmpod_clusters", status="Failed") == 1
    assert value(after, "slurmpod_nodes", status="Running") == 3  # m1's; m2's were released
    assert all(v == 0 for (name, _), v in after.items() if name == "slurmpod_operations_in_flight")
    failures = "slurmpod_provider_launch_failures_total"
    assert value(after, failures, reason="capacity") - value(before, failures, reason="capacity") >= 1

    latency = "slurmpod_api_request_duration_seconds_count"
    assert value(after, latency, operation="CreateCluster", code="OK") - value(
        before, latency, operation="CreateCluster", code="OK") == 2
    assert value(after, latency, operation="DescribeCluster", code="ResourceNotFound") - value(
        before, latency, operation="DescribeCluster", code="ResourceNotFound") == 1
    assert value(after, "slurmpod_api_request_duration_seconds_bucket", operation="CreateCluster", code="OK",
                 le="+Inf") >= 2
    passes = "slurmpod_reconcile_pass_duration_seconds_count"
    assert value(after, passes) > value(before, passes)
    assert value(after, "slurmpod_reconcile_pass_duration_seconds_sum") > 0


def test_unknown_operations_do_not_grow_labels(srv: RunningServer) -> None:
    for i in range(3):
        srv.raw(f"SageMaker.Made{i}Up", {})
    samples = scrape(srv)
    ops = {dict(labels).get("operation") for (name, labels) in samples if name.startswith("slurmpod_api_request")}
    assert not any(op and op.startswith("Made") for op in ops)
    assert value(samples, "slurmpod_api_request_duration_seconds_count", operation="other",
                 code="UnknownOperationException") >= 3


def test_health_endpoints(srv: RunningServer) -> None:
    assert requests.get(f"{srv.endpoint}/healthz", timeout=10).json() == {"status": "ok"}
    r = requests.get(f"{srv.endpoint}/readyz", timeout=10)
    assert r.status_code == 200 and r.json() == {"ready": True}


def test_reconciler_instruments_rendered_elsewhere_replace_this_process_s() -> None:
    """``slurmpod server --reconciler process``: the API process renders its own families and the child's text of
    the reconciler's (``metrics.render(reconciler=...)``); every family once."""
    from slurmpod.observability import metrics

    def families(text: str) -> list[str]:
        return [line.split()[2].removesuffix("_created").removesuffix("_total") for line in text.splitlines()
                if line.startswith("# TYPE ")]

    child = metrics.render_reconciler().decode()
    assert set(families(child)) == set(metrics.RECONCILER_FAMILIES)
    merged = metrics.render(reconciler=child.encode()).decode()
    types = [line.split()[2] for line in merged.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))  # every family (and series kind) once
    assert set(metrics.RECONCILER_FAMILIES) < set(families(merged))
    assert "slurmpod_api_request_duration_seconds" in types
