"""Webhook notifications: URLs from typed tags and the store, the SNS-shaped message of a typed Notification."""

from __future__ import annotations

import json
import threading
from typing import Any

from slurmpod.domain import events as ev
from slurmpod.domain.model import ClusterRecord
from slurmpod.domain.spec import ClusterSpec, Tag
from slurmpod.domain.status import ClusterStatus
from slurmpod.notify import TAG_KEY, Notifier, webhook_urls


class _Settings:
    def __init__(self, value: Any = None) -> None:
        self.value = value

    def get_setting(self, key: str) -> Any:
        return self.value

    def put_setting(self, key: str, value: Any) -> None:
        self.value = value


def _cluster(*tags: Tag) -> ClusterRecord:
    return ClusterRecord("cid", "123456789012", "us-east-1", "c", "arn:c", ClusterSpec("c", tags=tags),
                         ClusterStatus.IN_SERVICE, 0.0)


def test_urls_from_tags_and_settings_deduplicated() -> None:
    rec = _cluster(Tag(TAG_KEY, "http://a"), Tag("other", "http://no"), Tag(TAG_KEY, "ftp://bad"))
    store = _Settings({"cid": ["https://b", "http://a"]})
    assert webhook_urls(rec, store) == ["http://a", "https://b"]


def test_notify_posts_the_notification() -> None:
    posted: list[tuple[str, bytes]] = []

    def post(url: str, body: bytes, timeout: float) -> int:
        posted.append((url, body))
        return 200

    notifier = Notifier(_Settings(), post=post, backoff=0.0)
    _, note = ev.controller_down("c", "ctl", "i-1", "ip-1", backup=None)
    done = threading.Event()
    orig = notifier._deliver

    def deliver(urls: Any, body: bytes) -> None:
        orig(urls, body)
        done.set()

    notifier._deliver = deliver  # type: ignore[method-assign]
    notifier.notify(_cluster(Tag(TAG_KEY, "http://a")), note, 0.0)
    assert done.wait(5)
    url, body = posted[0]
    msg = json.loads(body)
    assert url == "http://a" and msg["Subject"] == "slurmpod: ControllerDown in c"
    assert json.loads(msg["Message"]) == {
        "ClusterName": "c", "ClusterArn": "arn:c", "Event": "ControllerDown", "InstanceId": "i-1",
        "Hostname": "ip-1", "Description": note.description}
    assert note.description.endswith("is down; no backup controller serves")
