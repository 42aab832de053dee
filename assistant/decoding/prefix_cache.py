"""Reuse of recent prompts' KV caches and hidden-state rows across requests.

Editors ask again and again about the same buffer, so the prompt of the next request usually
shares a long token prefix with a recent one. The stored keys, values and drafter hidden rows
of that prefix are copied into the new request's cache and only the rest of the prompt is
prefilled. Entries are evicted least recently used first, past a memory bound or a number of
entries (one: the passes of an edit made definition by definition share the latest pass's prompt).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Snapshot:
    ids: np.ndarray  # the positions it covers: prompt[:-1]
    keys: list[torch.Tensor]  # per layer [1, kv_heads, len(ids), head_dim]
    values: list[torch.Tensor]
    hidden: dict[int, torch.Tensor]  # drafter layer -> [len(ids), width]

    @property
    def bytes(self) -> int:
        tensors = self.keys + self.values + list(self.hidden.values())
        return sum(t.numel() * t.element_size() for t in tensors)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    size = min(len(a), len(b))
    differ = np.flatnonzero(a[:size] != b[:size])
    return int(differ[0]) if len(differ) else size


class PrefixCache:
    def __init__(self, max_bytes: int, entries: int | None = None):
        self.max_bytes, self.max_entries = max_bytes, entries
        self.entries: OrderedDict[int, Snapshot] = OrderedDict()

    def lookup(self, ids: list[int], layers: tuple[int, ...]) -> tuple[Snapshot | None, int]:
        """The entry sharing the longest prefix with `ids` that holds the hidden rows of `layers`."""
        wanted = np.asarray(ids)
        best, length = None, 0
        for key, snapshot in self.entries.items():
            if set(layers) <= set(snapshot.hidden):
                shared = common_prefix(snapshot.ids, wanted)
                if shared > length:
                    best, length = key, shared
        if best is None:
            return None, 0
        self.entries.move_to_end(best)
        return self.entries[best], length

    def store(self, ids: list[int], cache, hidden: dict[int, torch.Tensor]) -> None:
        size = len(ids)
        key = hash(np.asarray(ids).tobytes())
        if key in self.entries and set(hidden) <= set(self.entries[key].hidden):
            self.entries.move_to_end(key)  # the same prompt again: what is stored is already all of it
            return
        # Keys and values are cloned: the decode loop's cache grows and is cropped after this.
        snapshot = Snapshot(np.asarray(ids), [layer.keys[:, :, :size].clone() for layer in cache.layers],
                            [layer.values[:, :, :size].clone() for layer in cache.layers],
                            {layer: rows[:size].clone() for layer, rows in hidden.items()})
        if snapshot.bytes > self.max_bytes:
            return
        self.entries.pop(key, None)
        self.entries[key] = snapshot
        while (sum(s.bytes for s in self.entries.values()) > self.max_bytes
               or self.max_entries is not None and len(self.entries) > self.max_entries):
            self.entries.popitem(last=False)


def restore(snapshot: Snapshot, length: int, cache, hidden: dict[int, torch.Tensor]) -> None:
    """Fill an empty cache and the hidden-row buffers with the first `length` positions of `snapshot`."""
    for index, (keys, values) in enumerate(zip(snapshot.keys, snapshot.values)):
        cache.update(keys[:, :, :length], values[:, :, :length], index)
    for layer, rows in hidden.items():
        rows[:length] = snapshot.hidden[layer][:length]
