from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpod.settings import Settings
from tests.serverproc import RunningServer, free_port, thread_server


@pytest.fixture
def sim_server(tmp_path: Path) -> Iterator[RunningServer]:
    """A real slurmpod HTTP server on loopback with the SIMULATED provider and a SQLite store."""
    settings = Settings(
        state_dir=tmp_path / "state", port=free_port(), provider="simulated", reconcile_interval=0.1,
        simulated_launch_delay=0.01,
    )
    with thread_server(settings) as srv:
        yield srv
