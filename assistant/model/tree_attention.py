"""Attention of a token tree's rows in one forward, each row computed as the chain that leads to it would be.

Invariant: every row of a tree gets the bits that row gets in a forward of the chain from the root to it.
Its products are a row's alike whatever rows come with it (`model.exactness`), it is rotated at the
position of its depth, and its attention is the row-exact path's (`attention.attend`) over the keys a
chain would hold: the rows are fed depth first, so a branch's rows not fed before are one run after its
ancestors; for each run the cache is given, at the positions after its own, the ancestors' keys and values
as the layer computed them, and the run is attended there as a chain's rows are, whatever other branches
the tree has. A masked attention over the whole tree would not do: the kernel sums keys in lanes by their
position, and a tree's rows sit at other positions than the chain's. After verification `keep` writes the
accepted path's keys and values after the cache's positions (moving a few rows a layer, far cheaper than
running them again), so the cache holds what the chain's forward would have left.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from assistant.model import attention, exactness
from assistant.model.kv_cache import PreallocatedLayer


@dataclass
class Tree:
    """A token tree's rows as one forward feeds them: row 0 the root, row r > 0 after its parent, depth first."""

    depths: torch.Tensor  # [rows]: each row's position after the cache's
    runs: list[tuple[list[int], int, int]]  # (a run's ancestors, its first row, its end), in row order
    keys: list[torch.Tensor] = field(default_factory=list)  # per layer [1, kv_heads, rows, dim], as attended
    values: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def of(cls, parents: list[int]) -> "Tree":
        """The tree whose row r > 0 follows row parents[r] < r, rows depth first (a run ends where the next
        row is not its child)."""
        depths, runs = [0], [([], 0, 1)]
        for row in range(1, len(parents)):
            depths.append(depths[parents[row]] + 1)
            if parents[row] == row - 1:
                runs[-1] = (runs[-1][0], runs[-1][1], row + 1)
            else:
                runs.append((path(parents, parents[row]), row, row + 1))
        return cls(torch.tensor(depths), runs)


def path(parents: list[int], row: int) -> list[int]:
    """The rows from the root to `row`, both included."""
    rows = [row]
    while rows[-1] != 0:
        rows.append(parents[rows[-1]])
    return rows[::-1]


def takes(model, cache, rows: int) -> bool:
    """Whether a tree of `rows` rows can be fed to `model` at once: our forward (`transformer.fits`, checked by
    the caller) on a preallocated cache with room for them, rows alike at every count (no fixed shapes, where a
    run would change the forward's shapes), and within the rows attention computes alike."""
    return (not exactness.fixed_shapes(model) and rows <= exactness.FEW
            and all(isinstance(layer, PreallocatedLayer) for layer in cache.layers)
            and all(not layer.is_initialized or layer.length + rows <= layer.capacity for layer in cache.layers))


def attend(tree: Tree, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cos: torch.Tensor,
           sin: torch.Tensor, cache, index: int, module) -> torch.Tensor:
    """`attention.attend` of a tree's rows, run by run, each after its ancestors' keys and values; keeps every
    row's in `tree.keys` and `tree.values` and leaves the cache's layer as it found it."""
    layer = cache.layers[index]
    start, outs = layer.get_seq_length(), []
    for ancestors, first, end in tree.runs:
        if ancestors:
            layer.key_buffer[:, :, start:start + len(ancestors)] = tree.keys[index][:, :, ancestors]
            layer.value_buffer[:, :, start:start + len(ancestors)] = tree.values[index][:, :, ancestors]
            layer.advance(len(ancestors))
        rows = slice(first, end)
        outs.append(attention.attend(query[:, rows], key[:, rows], value[:, rows], cos[:, rows], sin[:, rows],
                                     cache, index, module))
        if len(tree.keys) == index:  # the layer's first run: its buffer's shapes are known
            tree.keys.append(layer.key_buffer.new_empty(*layer.key_buffer.shape[:2], len(tree.depths),
                                                        layer.key_buffer.shape[-1]))
            tree.values.append(torch.empty_like(tree.keys[-1]))
        fed = slice(start + len(ancestors), start + len(ancestors) + end - first)
        tree.keys[index][:, :, rows] = layer.key_buffer[:, :, fed]
        tree.values[index][:, :, rows] = layer.value_buffer[:, :, fed]
        layer.crop(start - layer.get_seq_length())
    return torch.cat(outs, dim=1)


@torch.inference_mode()
def keep(tree: Tree, cache, rows: list[int]) -> None:
    """Append the keys and values of the tree's `rows` (a path from the root) to every layer of `cache`."""
    for index, layer in enumerate(cache.layers):
        start = layer.get_seq_length()
        layer.key_buffer[:, :, start:start + len(rows)] = tree.keys[index][:, :, rows]
        layer.value_buffer[:, :, start:start + len(rows)] = tree.values[index][:, :, rows]
        layer.advance(len(rows))
