"""``NodeView``: a cluster's nodes, read from the store only if a caller looks at them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from slurmpod.domain.model import NodeRecord


class NodeView(Sequence[NodeRecord]):
    """A cluster's nodes, read from the store on first use: a caller that never looks at them costs nothing
    (a simulated boot step ignores them; reading 10,000 rows per boot step made booting quadratic)."""

    def __init__(self, load: Callable[[], list[NodeRecord]]) -> None:
        self._load = load
        self._nodes: list[NodeRecord] | None = None

    def _all(self) -> list[NodeRecord]:
        if self._nodes is None:
            self._nodes = self._load()
        return self._nodes

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __iter__(self) -> Iterator[NodeRecord]:
        return iter(self._all())
