"""Cluster notifications (the SNS equivalent): JSON POSTed to a cluster's webhook URLs, with retries.

Webhook URLs come from the cluster's ``Tags`` (key ``slurmpod:webhook``, at CreateCluster) and from
``slurmpod webhooks add CLUSTER URL`` (kept in the store). Delivery runs in a background thread so the
reconciler never waits on a slow receiver; each message is retried 3 times with backoff.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from slurmpod.domain.events import Notification
from slurmpod.domain.model import ClusterRecord

log = logging.getLogger("slurmpod.notify")
TAG_KEY = "slurmpod:webhook"
SETTING_KEY = "webhooks"
ATTEMPTS = 3


class SettingsStore(Protocol):
    def get_setting(self, key: str) -> Any: ...

    def put_setting(self, key: str, value: Any) -> None: ...


def webhook_urls(cluster: ClusterRecord, store: SettingsStore) -> list[str]:
    urls = cluster.spec.tag_values(TAG_KEY)
    urls += list((store.get_setting(SETTING_KEY) or {}).get(cluster.cluster_id, []))
    return list(dict.fromkeys(u for u in urls if u.startswith(("http://", "https://"))))


def subject_of(cluster: ClusterRecord, note: Notification) -> str:
    return f"slurmpod: {note.kind.value} in {cluster.name}"


def detail_of(note: Notification) -> dict[str, Any]:
    """The notification as the members of the message body (after ClusterName and ClusterArn)."""
    return {"Event": note.kind.value, "InstanceId": note.instance_id, "Hostname": note.hostname,
            "Description": note.description}


def message(cluster: ClusterRecord, subject: str, detail: Mapping[str, Any], now: float) -> dict[str, Any]:
    """An SNS-shaped envelope around slurmpod's event detail."""
    return {
        "Type": "Notification",
        "MessageId": str(uuid.uuid4()),
        "TopicArn": f"arn:aws:sns:{cluster.region}:{cluster.account_id}:slurmpod-{cluster.name}",
        "Subject": subject,
        "Message": json.dumps({"ClusterName": cluster.name, "ClusterArn": cluster.arn, **detail}),
        "Timestamp": datetime.fromtimestamp(now, tz=UTC).isoformat().replace("+00:00", "Z"),
    }


def _post(url: str, body: bytes, timeout: float) -> int:
    req = urllib.request.Request(url, data=body, method="POST",  # noqa: S310 - operator-configured URL
                                 headers={"Content-Type": "application/json", "User-Agent": "slurmpod"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        return int(resp.status)


class Notifier:
    def __init__(self, store: SettingsStore, *, post: Callable[[str, bytes, float], int] = _post,
                 backoff: float = 1.0) -> None:
        self.store = store
        self.post = post
        self.backoff = backoff

    def notify(self, cluster: ClusterRecord, note: Notification, now: float) -> None:
        """Delivers ``note`` to the cluster's webhooks in the background (nothing to do without any)."""
        self.send(cluster, subject_of(cluster, note), detail_of(note), now)

    def send(self, cluster: ClusterRecord, subject: str, detail: Mapping[str, Any], now: float) -> None:
        """The older call form (subject and message members built by the caller); prefer :meth:`notify`."""
        urls = webhook_urls(cluster, self.store)
        if not urls:
            return
        body = json.dumps(message(cluster, subject, detail, now)).encode()
        threading.Thread(target=self._deliver, args=(urls, body), daemon=True, name="slurmpod-notify").start()

    def _deliver(self, urls: Sequence[str], body: bytes) -> None:
        for url in urls:
            for attempt in range(ATTEMPTS):
                try:
                    status = self.post(url, body, 5.0)
                    if 200 <= status < 300:
                        break
                    log.warning("webhook %s answered %d", url, status)
                except OSError as exc:
                    log.warning("webhook %s failed (attempt %d): %s", url, attempt + 1, exc)
                time.sleep(self.backoff * (2**attempt))
