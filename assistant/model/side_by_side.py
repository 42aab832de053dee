"""Several sequences' rows in one forward, each sequence attended over its own KV cache.

Invariant: every row gets the bits a forward of its own sequence's rows alone gives it. The products
compute a row alike whatever rows come with it (`model.exactness`: within `FEW` rows where shapes are not
fixed, which the caller keeps to, as `decoding.lockstep` does), and each sequence's rows are rotated at
the positions after its own cache's and attended over that cache by `attention.attend`, as a chain's step
is; the cache is left holding them, as a step leaves it.
Why: on a CPU, a forward of a few rows costs about what one row does, since the weights are read once for
all of them (the 1.5B on AMX: 4 rows cost 1.2 times one row), so generations that make a token a step go
about as many times faster side by side (`decoding.lockstep`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from assistant.model import attention


@dataclass
class Sequences:
    """A forward's rows as several sequences: the first `counts[0]` rows follow `caches[0]`'s positions, and so on."""

    caches: list
    counts: list[int]

    def positions(self, device: torch.device) -> torch.Tensor:
        """Each row's position: the next ones of its sequence's cache."""
        return torch.cat([cache.get_seq_length() + torch.arange(count, device=device)
                          for cache, count in zip(self.caches, self.counts)])

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cos: torch.Tensor,
               sin: torch.Tensor, index: int, module) -> torch.Tensor:
        """`attention.attend` of each sequence's rows over its own cache, the results in row order."""
        outs, first = [], 0
        for cache, count in zip(self.caches, self.counts):
            rows = slice(first, first + count)
            outs.append(attention.attend(query[:, rows], key[:, rows], value[:, rows], cos[:, rows], sin[:, rows],
                                         cache, index, module))
            first += count
        return torch.cat(outs, dim=1)

