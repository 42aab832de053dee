"""Drafting strategies: each proposes the next K tokens by copying them from the context.

Convention (0-based): the context holds tokens x[0..n-1]; the last one, x[n-1], is the
token the model produced but has not been fed yet, so model artifacts (hidden states,
keys) exist for positions 0..n-2. A candidate is a position i < n-1 with x[i] == x[n-1];
the draft is x[i+1 : i+1+K], through the first EOS in it at most (generation ends there, and a
rewrite's prompt holds the chat template's next turn after one). Strategies differ only in which
candidate they pick:

- `NoDraft` (`ar`): never drafts; plain decoding through the same loop.
- `NgramDraft` (`pld`): the candidate with the longest matching suffix, most recent on ties.
- `HiddenDraft` (`pld+h`): PLD+(h), the candidate whose preceding hidden state at layer l is
  most similar (cosine) to that of the current position: cos(H_l[i-1], H_l[n-2]).
- `AttentionDraft` (`pld+a`): PLD+(a), the candidate the induction heads attend to most from
  the last fed position (max over the selected heads); induction heads at query n-2 attend
  to the positions whose previous token was x[n-2], i.e. to the copies of x[n-1].

Each ranks every candidate (`rank`, best first, the most recent first on ties) and proposes the
continuation of the first; a token tree (`decoding.tree`) verifies the continuations of several.

Every strategy is a `Drafter`; the decode loop (decoding.decode) knows no other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from assistant.model.attention import head_attention


@dataclass
class Context:
    """One generation's state, which the decode loop keeps and drafters read: the tokens so far with an
    incremental token->positions index, the hidden rows of the layers drafters ask for, and the
    model's KV cache. The cache belongs to the loop (prefill fills it, every step feeds and crops
    it); `AttentionDraft` alone also reads it, for the keys its heads attend to."""

    tokens: np.ndarray  # [capacity] buffer; tokens[:n] are valid
    n: int
    index: dict[int, list[int]]  # token -> its positions in tokens[:n], oldest first
    hidden: dict[int, torch.Tensor]  # layer -> [capacity, width] buffer of that layer's inputs; rows [:n-1] valid
    cache: object  # the model's KV cache for positions 0..n-2
    eos: frozenset[int] = frozenset()  # tokens that end the generation: a continuation stops at one

    @classmethod
    def start(cls, prompt: list[int], capacity: int, layers: tuple[int, ...], width: int,
              dtype: torch.dtype, device: torch.device, cache, eos: frozenset[int] = frozenset()) -> "Context":
        context = cls(np.zeros(capacity, dtype=np.int64), 0, {},
                      {layer: torch.empty(capacity, width, dtype=dtype, device=device) for layer in layers}, cache,
                      eos)
        context.append(prompt)
        return context

    def append(self, tokens: list[int]) -> None:
        for token in tokens:
            self.index.setdefault(token, []).append(self.n)
            self.tokens[self.n] = token
            self.n += 1

    def store_hidden(self, hidden_states: tuple[torch.Tensor, ...], start: int, count: int) -> None:
        """Keep the first `count` rows of a forward pass's hidden states as positions start.."""
        for layer, buffer in self.hidden.items():
            buffer[start:start + count] = hidden_states[layer][0, :count]

    def candidates(self) -> np.ndarray:
        """Earlier positions of the last token, oldest first."""
        return np.asarray(self.index[int(self.tokens[self.n - 1])][:-1], dtype=np.int64)

    def continuation(self, position: int, k: int) -> list[int]:
        """Up to `k` tokens after `position`, through the first EOS among them: the generation ends at an EOS,
        so what a prompt holds after one (the chat template's next turn) would be verified for nothing."""
        draft = self.tokens[position + 1:min(position + 1 + k, self.n)].tolist()
        return draft[:next((i + 1 for i, token in enumerate(draft) if token in self.eos), len(draft))]


class Drafter(Protocol):
    """A drafting strategy, as the decode loop sees it (compare transformers' PromptLookupCandidateGenerator).

    Invariant: a draft is a copy. For a context of n tokens x[0..n-1], `propose(context, k)`
    returns ([], -1) or (draft, origin) with 0 <= origin < n-1, x[origin] == x[n-1],
    draft == x[origin+1 : origin+1+len(draft)] and 1 <= len(draft) <= k; it changes nothing in
    the context. The origin is what attribution follows: an accepted draft token was copied from
    origin+1+i. `rank(context)` returns such origins, best first; `propose` drafts after its first.
    Verification, not the drafter, decides what is kept, so any drafter keeps greedy decoding
    token-identical to plain decoding; a better one only gets more tokens accepted.
    """

    layers: tuple[int, ...]  # decoder layers whose inputs the drafter reads: context.hidden[L], [capacity, width]

    def rank(self, context: Context) -> np.ndarray:
        """Positions i < n-1 with x[i] == x[n-1] that a draft may follow, best first."""
        ...

    def propose(self, context: Context, k: int) -> tuple[list[int], int]:
        """Up to `k` tokens (none when k <= 0) to verify after x[n-1], and the position they follow."""
        ...


def best_first(candidates: np.ndarray, scores) -> np.ndarray:
    """`candidates` (oldest first) by descending score, the latest first on ties."""
    scores = np.asarray(scores, dtype=np.float64)
    return candidates[np.lexsort((-np.arange(len(scores)), -scores))]


class Ranking:
    """What every drafter shares: its proposal is the continuation of its best-ranked candidate."""

    def propose(self, context: Context, k: int) -> tuple[list[int], int]:
        ranked = self.rank(context) if k > 0 else ()
        if len(ranked) == 0:
            return [], -1
        best = int(ranked[0])
        return context.continuation(best, k), best


class NoDraft(Ranking):
    """Never drafts: plain decoding through the same loop, the reference every other strategy must equal."""

    layers: tuple[int, ...] = ()

    def rank(self, context: Context) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)


@dataclass
class NgramDraft(Ranking):
    max_ngram: int = 3
    layers: tuple[int, ...] = ()

    def rank(self, context: Context) -> np.ndarray:
        candidates = context.candidates()
        if len(candidates) == 0:
            return candidates
        x, n = context.tokens, context.n
        matched = np.ones(len(candidates), dtype=np.int64)
        alive = np.ones(len(candidates), dtype=bool)
        for back in range(1, self.max_ngram):
            if n - 1 - back < 0:
                break
            previous = candidates - back
            alive &= (previous >= 0) & (x[np.maximum(previous, 0)] == x[n - 1 - back])
            matched += alive
        return best_first(candidates, matched)


@dataclass
class HiddenDraft(Ranking):
    layer: int

    @property
    def layers(self) -> tuple[int, ...]:
        return (self.layer,)

    def rank(self, context: Context) -> np.ndarray:
        candidates = context.candidates()
        candidates = candidates[candidates >= 1]
        if len(candidates) == 0 or context.n < 2:
            return candidates[:0]
        hidden = context.hidden[self.layer]
        query = hidden[context.n - 2].float()
        keys = hidden[torch.from_numpy(candidates - 1).to(hidden.device)].float()
        similarity = torch.nn.functional.cosine_similarity(keys, query[None], dim=-1)
        return best_first(candidates, similarity.cpu().numpy())


@dataclass
class AttentionDraft(Ranking):
    """Scores candidates with the attention of chosen (layer, head) pairs, computed only for the
    last fed position and only for those heads, from its hidden state and the cached keys."""

    model: torch.nn.Module
    heads: list[tuple[int, int]]
    _by_layer: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self):
        for layer, head in self.heads:
            self._by_layer.setdefault(layer, []).append(head)

    @property
    def layers(self) -> tuple[int, ...]:
        # hidden_states[L] is the input of decoder layer L, which is what its attention projects.
        return tuple(sorted(self._by_layer))

    def rank(self, context: Context) -> np.ndarray:
        candidates = context.candidates()
        if len(candidates) == 0 or context.n < 2:
            return candidates[:0]
        position = context.n - 2
        hidden = {layer: context.hidden[layer][position:position + 1] for layer in self._by_layer}
        scores = head_attention(self.model, context.cache, self._by_layer, hidden,
                                torch.tensor([position], device=self.model.device))[:, 0]
        best_by_max = scores[:, torch.from_numpy(candidates).to(scores.device)].amax(0)
        return best_first(candidates, best_by_max.float().cpu().numpy())
