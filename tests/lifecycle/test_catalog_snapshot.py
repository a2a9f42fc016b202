"""``ImageCatalog.snapshot``: one read of the catalogue for a request's lookups, read-only, the parse reused."""

from __future__ import annotations

from typing import Any

import pytest

from slurmpod.lifecycle.images import BUILTIN, ImageCatalog, ImageError


class CountingSettings:
    """A settings store (the Protocol ``ImageCatalog`` needs) that counts its reads."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.reads = 0

    def get_setting(self, key: str) -> Any:
        self.reads += 1
        return self.values.get(key)

    def put_setting(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_a_snapshot_reads_the_catalogue_once_for_every_lookup() -> None:
    settings = CountingSettings()
    catalog = ImageCatalog(settings)
    new = catalog.publish(base=None, script="echo hi", description="", now=1.0)
    settings.reads = 0

    snap = catalog.snapshot()
    assert settings.reads == 1
    assert snap.latest() == new
    assert snap.resolve(None) == new and snap.resolve("default") == new
    assert snap.get(BUILTIN.image_id) == BUILTIN
    with pytest.raises(ImageError):
        snap.resolve("ami-00000000000000099")
    assert settings.reads == 1  # every lookup above answered from the one read


def test_a_snapshot_is_the_catalogue_as_read_then_and_cannot_publish() -> None:
    settings = CountingSettings()
    catalog = ImageCatalog(settings)
    first = catalog.publish(base=None, script="echo 1", description="", now=1.0)
    snap = catalog.snapshot()
    second = catalog.publish(base=None, script="echo 2", description="", now=2.0)

    assert snap.latest() == first  # taken before the second release
    assert catalog.snapshot().latest() == second and catalog.latest() == second
    with pytest.raises(ImageError, match="cannot publish"):
        snap.publish(base=None, script="echo 3", description="", now=3.0)
    assert [i.image_id for i in catalog.releases()] == [BUILTIN.image_id, first.image_id, second.image_id]
