"""The reconciler's store calls wait for the API's requests in flight, never longer than MAX_WAIT each."""

from __future__ import annotations

import threading
import time

from slurmpod.reconciler.yielding import MAX_WAIT, ApiGate, YieldingStore


class _Store:
    name = "plain attribute"

    def __init__(self) -> None:
        self.calls: list[float] = []

    def get(self, x: int) -> int:
        self.calls.append(time.monotonic())
        return x * 2


def test_calls_pass_through_when_no_request_is_in_flight() -> None:
    store = _Store()
    view = YieldingStore(store, ApiGate())
    assert view.get(21) == 42
    assert view.name == "plain attribute"
    assert view.get(1) == 2 and len(store.calls) == 2


def test_a_call_waits_for_the_request_in_flight() -> None:
    gate = ApiGate()
    store = _Store()
    view = YieldingStore(store, gate)
    gate.enter()
    left = threading.Event()

    def finish() -> None:
        time.sleep(MAX_WAIT / 4)
        left.set()
        gate.leave()

    threading.Thread(target=finish).start()
    assert view.get(1) == 2
    assert left.is_set()
    assert gate.busy() == 0


def test_a_busy_api_delays_background_work_but_never_stops_it() -> None:
    gate = ApiGate()
    gate.enter()
    gate.enter()
    view = YieldingStore(_Store(), gate)
    t0 = time.monotonic()
    for _ in range(3):
        assert view.get(2) == 4
    took = time.monotonic() - t0
    assert 3 * MAX_WAIT * 0.9 <= took < 3 * MAX_WAIT + 1.0
    gate.leave()
    gate.leave()
    t0 = time.monotonic()
    view.get(3)
    assert time.monotonic() - t0 < MAX_WAIT
