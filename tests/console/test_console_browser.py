"""The console in real headless Chromium (Playwright): sign in, open a cluster, see nodes and events, publish
a new image release, see the banner, reject bad input with the API's messages, update software and watch
every node's image status turn UpToDate. Saves a screenshot of the cluster page to artifacts/cluster.png."""

from __future__ import annotations

import re
import time
from typing import Any

from slurmpod.lifecycle.images import ImageCatalog
from tests.console.conftest import ARTIFACTS
from tests.serverproc import RunningServer, seed_groups, wait_status

TIMEOUT_MS = 30_000


def _texts(page: Any, selector: str) -> list[str]:
    return [t.strip() for t in page.locator(selector).all_inner_texts()]


def test_update_software_from_the_console(srv: RunningServer, browser: Any) -> None:
    from playwright.sync_api import expect

    assert srv.credential is not None and srv.server is not None
    c = srv.client()
    c.create_cluster(ClusterName="hp", InstanceGroups=seed_groups(2))
    wait_status(c, "hp", {"InService"})
    node_ids = sorted(n["InstanceId"] for n in c.list_cluster_nodes(ClusterName="hp")["ClusterNodeSummaries"])

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        # sign in with the API's access key
        page.goto(f"{srv.endpoint}/console")
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        page.get_by_label("Access key ID").fill(srv.credential.access_key_id)
        page.get_by_label("Secret access key").fill(srv.credential.secret_access_key)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Clusters")).to_be_visible()
        cookie = next(ck for ck in context.cookies() if ck["name"] == "slurmpod_console")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

        # the cluster page: groups, nodes, events
        page.get_by_role("link", name="hp", exact=True).click()
        expect(page.get_by_role("heading", name="hp", level=1)).to_be_visible()
        expect(page.locator("#cluster-status")).to_have_text("InService")
        expect(page.locator("#nodes-table tbody tr")).to_have_count(3)
        assert sorted(page.locator("#nodes-table tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.node)")) == node_ids
        expect(page.locator("#groups-table tbody tr")).to_have_count(2)
        expect(page.locator("#events li").first).to_be_visible()
        assert any("Instance creation started" in t for t in _texts(page, "#events li"))
        expect(page.locator("#update-banner")).to_have_count(0)

        # a new image release: the banner appears by itself (the page polls)
        new = ImageCatalog(srv.server.store).publish(base=None, script="echo new", description="console test",
                                                     now=time.time())
        expect(page.locator("#update-banner")).to_be_visible()
        expect(page.locator("#update-banner")).to_contain_text("controller-group, compute-group")
        expect(page.locator('#nodes-table [data-col="image-status"]', has_text="UpdateAvailable")).to_have_count(3)
        expect(page.locator("[data-image-status-for]", has_text="update available")).to_have_count(2)

        # bad input: no group and a bad cron -> the API's messages next to the fields
        page.get_by_role("link", name="Update software").click()
        for box in page.locator('input[name="group"]').all():
            box.uncheck()
        page.get_by_label("Recurring or one-time cron schedule").check()
        page.get_by_label("Cron expression (UTC)").fill("0 25 * * ? *")
        page.get_by_role("button", name="Update software").click()
        expect(page.locator("#groups-error")).to_contain_text(
            "Member must have length greater than or equal to 1")
        expect(page.locator("#cron-error")).to_have_text(
            "1 validation error detected: Invalid ScheduleExpression cron(0 25 * * ? *): "
            "Hours value 25 is out of range 0-23.")
        expect(page.get_by_label("Cron expression (UTC)")).to_have_attribute("aria-invalid", "true")
        assert page.evaluate("document.activeElement.name") == "group"  # focus on the first invalid field
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#update-software").screenshot(path=str(ARTIFACTS / "update-form-errors.png"))
        assert c.describe_cluster(ClusterName="hp")["ClusterStatus"] == "InService"  # nothing was changed

        # update now, both groups
        for box in page.locator('input[name="group"]').all():
            box.check()
        page.get_by_label("Start now").check()
        page.get_by_role("button", name="Update software").click()
        expect(page.locator(".flash-success")).to_contain_text("Software update started")
        expect(page.locator('#nodes-table [data-col="image-status"]', has_text="UpToDate")).to_have_count(
            3, timeout=45_000)
        expect(page.locator("#cluster-status")).to_have_text("InService", timeout=20_000)
        expect(page.locator('#nodes-table [data-col="status"]', has_text="Running")).to_have_count(3)
        expect(page.locator("#update-banner")).to_have_count(0)
        expect(page.locator("[data-image-status-for]", has_text="up to date")).to_have_count(2)
        assert any("UpdateClusterSoftware completed successfully" in t for t in _texts(page, "#events li"))
        for n in c.list_cluster_nodes(ClusterName="hp")["ClusterNodeSummaries"]:
            assert n["ImageVersionStatus"] == "UpToDate"
            detail = c.describe_cluster_node(ClusterName="hp", NodeId=n["InstanceId"])["NodeDetails"]
            assert detail["CurrentImageId"] == new.image_id
        release_cells = page.locator("#nodes-table tbody tr td:nth-child(5)").all_inner_texts()
        assert set(release_cells) == {new.release}

        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "cluster.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})  # a phone: still usable, tables scroll
        expect(page.get_by_role("button", name="Update software")).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "cluster-narrow.png"), full_page=False)
        page.set_viewport_size({"width": 1280, "height": 900})

        # node action with a confirmation step
        target = next(iter(node_ids))
        page.get_by_role("link", name=f"Reboot {target}").click()
        expect(page.get_by_role("heading", name=re.compile(f"Reboot node {target}"))).to_be_visible()
        page.get_by_role("button", name="Reboot node").click()
        expect(page.locator(".flash-success")).to_contain_text(f"Reboot of {target} started.")
    finally:
        context.close()
