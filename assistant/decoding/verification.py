"""Verification: which of a draft's tokens plain decoding would have produced, from the logits of
one forward pass over the draft.

Invariant: greedy verification accepts exactly the draft tokens that greedy decoding would have
chosen, then the model's own next token, so the output is token-identical to plain decoding.
A token tree's greedy verification follows from its root the child greedy decoding chooses, as long
as there is one: the longest branch prefix greedy decoding would produce (a row's children differ by
token, so at most one is chosen). Sampled verification accepts d_i with the model's probability p(d_i)
and otherwise samples from p with d_i removed, which keeps the model's distribution exactly (the draft
is a point mass).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k filter
    top_p: float = 1.0
    seed: int | None = None


def probabilities(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Rows of the sampling distribution after temperature, top-k and top-p."""
    logits = logits.float() / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(logits, min(sampling.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        drop = sorted_probs.cumsum(-1) - sorted_probs >= sampling.top_p  # keep the smallest set reaching top_p
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def verify_greedy(logits: torch.Tensor, draft: list[int]) -> tuple[int, int]:
    """(accepted draft tokens, next token) under greedy decoding; logits are [k+1, vocab]."""
    predicted = logits.argmax(-1).tolist()
    accepted = 0
    while accepted < len(draft) and draft[accepted] == predicted[accepted]:
        accepted += 1
    return accepted, predicted[accepted]


def verify_tree_greedy(logits: torch.Tensor, children: list[dict[int, int]]) -> tuple[list[int], int]:
    """(the rows of the accepted path from the root, next token) under greedy decoding: logits are a token
    tree's rows [rows, vocab], children[r] maps a token to the row that drafts it after row r."""
    predicted = logits.argmax(-1).tolist()
    path = [0]
    while (child := children[path[-1]].get(predicted[path[-1]])) is not None:
        path.append(child)
    return path, predicted[path[-1]]


def verify_sampled(logits: torch.Tensor, draft: list[int], sampling: Sampling,
                   generator: torch.Generator) -> tuple[int, int]:
    probs = probabilities(logits, sampling).cpu()
    for i, token in enumerate(draft):
        if torch.rand((), generator=generator) < probs[i, token]:
            continue
        rest = probs[i].clone()
        rest[token] = 0.0
        return i, int(torch.multinomial(rest / rest.sum(), 1, generator=generator))
    return len(draft), int(torch.multinomial(probs[len(draft)], 1, generator=generator))
