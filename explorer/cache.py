"""One least-recently-used cache bounded by bytes, safe across threads: the dataset cache and the papers'
run caches use it, so a long-lived process (a server's worker, a notebook kernel) holds at most its limit.

Each process has its own caches (nothing is shared between processes, so nothing needs a lock across
them). `nbytes` estimates what an object holds: tensor storages (each counted once), numpy arrays,
modules' parameters and buffers, and the containers and dataclasses around them.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from explorer.settings import number

_MISSING = object()


class LRUCache:
    """{key: value}, least recently used dropped first once the values' bytes pass `max_bytes` (an int, or a
    function read at each insertion, e.g. of an environment variable). A value larger than the limit is
    not kept. `get_or_make` computes outside the lock: two threads may both compute a missing value."""

    def __init__(self, max_bytes: int | Callable[[], int], size_of: Callable[[Any], int] | None = None):
        self._limit = max_bytes if callable(max_bytes) else (lambda: max_bytes)
        self._size_of = size_of or nbytes
        self._items: OrderedDict = OrderedDict()  # key -> (value, bytes)
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            item = self._items.get(key, _MISSING)
            if item is _MISSING:
                return default
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: Any) -> None:
        size, limit = self._size_of(value), self._limit()
        with self._lock:
            self._items.pop(key, None)
            if size > limit:
                return
            self._items[key] = (value, size)
            total = sum(s for _, s in self._items.values())
            while total > limit:
                _, (_, dropped) = self._items.popitem(last=False)
                total -= dropped

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = make()
            self.put(key, value)
        return value

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(s for _, s in self._items.values())

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def megabytes_setting(name: str) -> Callable[[], int]:
    """A limit in bytes read from the setting `name` (megabytes, 0 or more; 0 keeps nothing) each time; its default
    when unset; a SettingError naming the variable when it is not a whole number."""
    def limit() -> int:
        return number(name) * 1_000_000

    return limit


def nbytes(obj: Any) -> int:
    """Bytes `obj` holds, roughly: tensors and arrays exactly (a storage shared by two tensors once),
    containers, dataclasses and modules by what they hold, anything else by sys.getsizeof."""
    return _walk(obj, set())


def _walk(obj: Any, seen: set) -> int:
    import numpy as np
    import torch

    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = ("storage", storage.data_ptr())
        if key in seen:
            return 0
        seen.add(key)
        return storage.nbytes()
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, torch.nn.Module):
        return sum(_walk(t, seen) for t in [*obj.parameters(), *obj.buffers()])
    if isinstance(obj, dict):
        return sys.getsizeof(obj) + sum(_walk(k, seen) + _walk(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sys.getsizeof(obj) + sum(_walk(v, seen) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return sum(_walk(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    return sys.getsizeof(obj)
