"""Fixtures of the console tests: one simulated-provider server per module, a signed-in HTTP session, and a
headless Chromium driven by Playwright (Debian's /usr/bin/chromium; Playwright never downloads a browser)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from slurmpod.settings import Settings
from tests.serverproc import RunningServer, free_port, thread_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    settings = Settings(state_dir=tmp_path_factory.mktemp("console") / "s", port=free_port(), provider="simulated",
                        reconcile_interval=0.1, simulated_launch_delay=0.05)
    with thread_server(settings) as s:
        yield s


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert m, "no CSRF token in the page"
    return m.group(1)


def sign_in(endpoint: str, access_key_id: str, secret: str) -> tuple[requests.Session, requests.Response]:
    """A requests session signed in to the console (the response is the page after sign-in)."""
    s = requests.Session()
    page = s.get(f"{endpoint}/console/signin", timeout=10)
    resp = s.post(f"{endpoint}/console/signin", timeout=10, data={
        "csrf_token": csrf_of(page.text), "access_key_id": access_key_id, "secret_access_key": secret})
    return s, resp


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        pytest.skip(f"{CHROMIUM} is not installed (scripts/install.sh installs Debian's chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()
