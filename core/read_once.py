"""Rows that never change once created, read once per process: a bounded map from a key to what was read."""

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadOnce(Generic[K, V]):
    """``read(key)``, once per process for each key, at most ``most`` kept (all dropped when full).

    Only for rows nothing ever updates: a process never sees a change to one it kept. A key read as None (no
    such row) is read again next time, since the row may have been created since."""

    def __init__(self, read: Callable[[K], V | None], *, most: int = 1000) -> None:
        self._read = read
        self.most = most
        self.kept: dict[K, V] = {}

    def __call__(self, key: K) -> V | None:
        value = self.kept.get(key)
        if value is None:
            value = self._read(key)
            if value is not None:
                if len(self.kept) >= self.most:
                    self.kept.clear()
                self.kept[key] = value
        return value
