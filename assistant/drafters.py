"""Drafting strategies: each proposes the next K tokens by copying them from the context.

Convention (0-based): the context holds tokens x[0..n-1]; the last one, x[n-1], is the
token the model produced but has not been fed yet, so model artifacts (hidden states,
keys) exist for positions 0..n-2. A candidate is a position i < n-1 with x[i] == x[n-1];
the draft is x[i+1 : i+1+K]. Strategies differ only in which candidate they pick:

- `NoDraft` (`ar`): never drafts; plain decoding through the same loop.
- `NgramDraft` (`pld`): the candidate with the longest matching suffix, most recent on ties.
- `HiddenDraft` (`pld+h`): PLD+(h), the candidate whose preceding hidden state at layer l is
  most similar (cosine) to that of the current position: cos(H_l[i-1], H_l[n-2]).
- `AttentionDraft` (`pld+a`): PLD+(a), the candidate the induction heads attend to most from
  the last fed position (max over the selected heads); induction heads at query n-2 attend
  to the positions whose previous token was x[n-2], i.e. to the copies of x[n-1].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Context:
    """Tokens so far with an incremental token->positions index and the hidden states drafters need."""

    tokens: np.ndarray  # capacity-sized buffer; tokens[:n] are valid
    n: int
    index: dict[int, list[int]]
    hidden: dict[int, torch.Tensor]  # layer -> [capacity, hidden] buffer; rows [:n-1] valid
    cache: object  # the model's KV cache for positions 0..n-2

    @classmethod
    def start(cls, prompt: list[int], capacity: int, layers: tuple[int, ...], width: int,
              dtype: torch.dtype, device: torch.device, cache) -> "Context":
        context = cls(np.zeros(capacity, dtype=np.int64), 0, {},
                      {layer: torch.empty(capacity, width, dtype=dtype, device=device) for layer in layers}, cache)
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
        return self.tokens[position + 1:min(position + 1 + k, self.n)].tolist()


def most_recent_best(scores: np.ndarray) -> int:
    """Index of the highest score, the latest one on ties."""
    return len(scores) - 1 - int(np.argmax(scores[::-1]))


class NoDraft:
    layers: tuple[int, ...] = ()

    def propose(self, context: Context, k: int) -> tuple[list[int], int]:
        return [], -1


@dataclass
class NgramDraft:
    max_ngram: int = 3
    layers: tuple[int, ...] = ()

    def propose(self, context: Context, k: int) -> tuple[list[int], int]:
        candidates = context.candidates()
        if k <= 0 or len(candidates) == 0:
            return [], -1
        x, n = context.tokens, context.n
        matched = np.ones(len(candidates), dtype=np.int64)
        alive = np.ones(len(candidates), dtype=bool)
        for back in range(1, self.max_ngram):
            if n - 1 - back < 0:
                break
            previous = candidates - back
            alive &= (previous >= 0) & (x[np.maximum(previous, 0)] == x[n - 1 - back])
            matched += alive
        best = int(candidates[most_recent_best(matched)])
        return context.continuation(best, k), best


@dataclass
class HiddenDraft:
    layer: int

    @property
    def layers(self) -> tuple[int, ...]:
        return (self.layer,)

    def propose(self, context: Context, k: int) -> tuple[list[int], int]:
        candidates = context.candidates()
        candidates = candidates[candidates >= 1]
        if k <= 0 or len(candidates) == 0 or context.n < 2:
            return [], -1
        hidden = context.hidden[self.layer]
        query = hidden[context.n - 2].float()
        keys = hidden[torch.from_numpy(candidates - 1).to(hidden.device)].float()
        similarity = torch.nn.functional.cosine_similarity(keys, query[None], dim=-1)
        best = int(candidates[most_recent_best(similarity.cpu().numpy())])
        return context.continuation(best, k), best


@dataclass
class AttentionDraft:
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

    def propose(self, context: Context, k: int) -> tuple[list[int], int]:
        candidates = context.candidates()
        if k <= 0 or len(candidates) == 0 or context.n < 2:
            return [], -1
        position = context.n - 2
        hidden = {layer: context.hidden[layer][position:position + 1] for layer in self._by_layer}
        scores = head_attention(self.model, context.cache, self._by_layer, hidden,
                                torch.tensor([position], device=self.model.device))[:, 0]
        best_by_max = scores[:, torch.from_numpy(candidates).to(scores.device)].amax(0)
        best = int(candidates[most_recent_best(best_by_max.float().cpu().numpy())])
        return context.continuation(best, k), best


@torch.inference_mode()
def head_attention(model, cache, heads_by_layer: dict[int, list[int]], hidden: dict[int, torch.Tensor],
                   positions: torch.Tensor) -> torch.Tensor:
    """Attention probabilities [heads, queries, keys] of the given heads for the query `positions`.

    `hidden[L]` holds the inputs of decoder layer L at those positions ([queries, width]); the
    keys come from the cache, already rotated, so only the queries need projecting and rotating.
    """
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    span = int(positions.max()) + 1
    future = torch.arange(span, device=positions.device)[None, :] > positions[:, None]
    rows = []
    for layer, heads in heads_by_layer.items():
        block = model.model.layers[layer]
        attention = block.self_attn
        normed = block.input_layernorm(hidden[layer][None])
        query = attention.q_proj(normed).view(1, len(positions), -1, attention.head_dim).transpose(1, 2)[:, heads]
        cos, sin = model.model.rotary_emb(normed, positions[None])
        query, _ = apply_rotary_pos_emb(query, query, cos, sin)
        kv_heads = torch.tensor(heads, device=query.device) // attention.num_key_value_groups
        keys = cache.layers[layer].keys[0, :, :span][kv_heads]  # [heads, keys, head_dim]
        logits = (query[0].to(keys.dtype) @ keys.transpose(-1, -2)).float() * attention.scaling
        rows.append(torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1))
    return torch.cat(rows)
