"""The accounting host's database volume is made ahead by a provider that can (``SeedWarming``): at server start
for the default image, and never for an image without MariaDB's template or a provider that cannot."""

from __future__ import annotations

from pathlib import Path

from slurmpod.lifecycle.images import Image
from slurmpod.providers.base import SeedWarming
from slurmpod.reconciler.accounting import AccountingService
from slurmpod.slurm.accounting import MARIADB_TEMPLATE


class WarmingProvider:
    """Only what ``AccountingService.warm`` touches."""

    name = "fake"

    def __init__(self) -> None:
        self.warmed: list[tuple[str, str]] = []

    def warm_seed(self, image_root: str, seed: str) -> None:
        self.warmed.append((image_root, seed))


class PlainProvider:
    name = "plain"


def _image(tmp_path: Path, *, template: bool, kind: str = "rootfs") -> Image:
    root = tmp_path / f"rootfs-{template}-{kind}"
    (root / MARIADB_TEMPLATE.lstrip("/") / ("mysql" if template else "")).mkdir(parents=True)
    return Image(image_id="ami-0123456789abcdef0", release="1", root=str(root), description="t", kind=kind)


def test_the_default_images_template_is_made_ahead(tmp_path: Path) -> None:
    provider = WarmingProvider()
    assert isinstance(provider, SeedWarming)
    image = _image(tmp_path, template=True)
    AccountingService(provider, tmp_path, image=image).warm()  # type: ignore[arg-type]
    assert provider.warmed == [(image.root, MARIADB_TEMPLATE)]


def test_nothing_is_made_without_a_template_a_systemd_image_or_a_provider_that_can(tmp_path: Path) -> None:
    provider = WarmingProvider()
    AccountingService(provider, tmp_path, image=_image(tmp_path, template=False)).warm()  # type: ignore[arg-type]
    AccountingService(provider, tmp_path,  # type: ignore[arg-type]
                      image=_image(tmp_path, template=True, kind="host")).warm()
    assert provider.warmed == []
    assert not isinstance(PlainProvider(), SeedWarming)
    AccountingService(PlainProvider(), tmp_path, image=_image(tmp_path, template=True)).warm()  # type: ignore[arg-type]
