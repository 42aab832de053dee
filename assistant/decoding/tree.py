"""Several candidates in one verification: the continuations of the best-ranked candidates, merged into a
token tree (SpecInfer, Sequoia, REST) whose rows one forward verifies together.

Invariant: every branch of the tree is a draft the drafter could have proposed (the continuation of a
candidate it ranked, `Drafter` invariant), cut as the loop cuts a chain's (at `k` tokens and the context's
end); the tree has at most `rows` rows (its root, the last token, included), so a tree that does not fit
leaves out the branches that would not, and a tree of one branch is that chain. A row's origin is the
best-ranked candidate whose continuation passes through it, which is what an accepted path's tokens are
attributed to. The tree is greedy only: sampled decoding verifies a chain (the loop's), whose lossless
acceptance is one draft's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from assistant.decoding.drafters import Context


@dataclass
class TokenTree:
    """Rows depth first: row 0 is x[n-1] (fed, not drafted), row r > 0 follows row parents[r] < r."""

    tokens: list[int]
    parents: list[int]
    origins: list[int]  # each row's origin: it copies x[origins[r] + depth of r]; the root's is -1
    children: list[dict[int, int]]  # each row's children by token
    drafts: dict[int, int] = field(default_factory=dict)  # origin -> its branch's length, best-ranked first

    @property
    def branches(self) -> int:
        return len(self.drafts)

    @property
    def best(self) -> int:
        """The best-ranked branch's origin (-1 for a tree without branches)."""
        return next(iter(self.drafts), -1)

    def add(self, parent: int, token: int, origin: int) -> int:
        """A new row of `token` after `parent`, copied from `origin`'s continuation; returns it."""
        self.children[parent][token] = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.origins.append(origin)
        self.children.append({})
        return len(self.tokens) - 1

    def first(self) -> tuple[list[int], int]:
        """The best-ranked branch alone: its draft and origin (([], -1) for a tree without branches)."""
        rows = [r for r in range(1, len(self.tokens)) if self.origins[r] == self.best]
        return [self.tokens[r] for r in rows], self.best


def grow(context: Context, ranked: np.ndarray, k: int, branches: int, rows: int) -> TokenTree:
    """The tree of the continuations (up to `k` tokens) of the `ranked` candidates, best first, until it has
    `branches` branches or the next would take it past `rows` rows; a continuation already in the tree adds
    no branch."""
    trie = TokenTree([int(context.tokens[context.n - 1])], [-1], [-1], [{}])
    for origin in (ranked if k > 0 else ()):
        draft = context.continuation(int(origin), k)
        node, depth = 0, 0
        while depth < len(draft) and draft[depth] in trie.children[node]:
            node, depth = trie.children[node][draft[depth]], depth + 1
        if depth == len(draft):
            continue
        if len(trie.tokens) + len(draft) - depth > rows:
            break
        for token in draft[depth:]:
            node = trie.add(node, token, int(origin))
        trie.drafts[int(origin)] = len(draft)
        if trie.branches == branches:
            break
    return depth_first(trie)


def depth_first(trie: TokenTree) -> TokenTree:
    """The same tree with its rows in depth-first order, each row's children in the order they were added."""
    order, stack = [], [0]
    while stack:
        row = stack.pop()
        order.append(row)
        stack += reversed(trie.children[row].values())
    new = {row: at for at, row in enumerate(order)}
    return TokenTree([trie.tokens[r] for r in order], [new.get(trie.parents[r], -1) for r in order],
                     [trie.origins[r] for r in order],
                     [{token: new[child] for token, child in trie.children[r].items()} for r in order], trie.drafts)
