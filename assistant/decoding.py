"""The decode loop: draft, verify the draft in one forward pass, keep exactly what plain decoding keeps.

Invariant between steps: the context holds n tokens, the KV cache and the stored hidden states
cover positions 0..n-2, and x[n-1] is the token chosen last, not yet fed. A step feeds
[x[n-1], d_1..d_k], accepts the longest prefix of the draft that the model agrees with plus one
token of its own, and crops the cache back to what was accepted. Greedy verification is
token-identical to plain decoding; sampled verification accepts d_i with the model's
probability p(d_i) and otherwise samples from p with d_i removed, which keeps the model's
distribution exactly (the draft is a point mass).

On CUDA a row's result depends on how many rows come with it: cuBLAS and the attention kernels
pick their tiling by the shapes. SmolLM2-135M in bfloat16 on an H100 (torch 2.11) left `ar`'s
greedy output with `pld` and with `pld+h` on 16 of 17 benchmark prompts, within the first 300
characters. So do oneDNN's bfloat16 matrix products on CPU: on a 2-core Xeon with AMX (torch 2.13),
of Qwen2.5-Coder-1.5B's shapes the MLP's down projection gave a row alone the bits it gets in a
batch of 2 to 6 rows and no other, and the logits of a 16-token forward differed from 16 one-token
forwards by up to 0.22. There (on CUDA, and in bfloat16 on CPU) every forward of a generation
therefore has a fixed shape (`fixed_shapes`): a step feeds STEP_ROWS rows, its tokens and then
copies of the last, whose positions are cropped away at once, and a draft is never longer than
that allows; the prompt goes in chunks of PROMPT_ROWS rows that start at multiples of PROMPT_ROWS
(a reused prefix is cut back to one), the last chunk padded the same way. With them, on the H100,
`pld` and `pld+h` gave `ar`'s output on all 10 prompts tried (5 code and 5 text edits, 96 tokens
each, the prefix cache on); a 64-row forward took 55 ms against 39 for one row (the 135M model is
bound by kernel launches there). On the Xeon, 32 rows after 1,500 tokens of context took 251 ms
against 188 for one and 206 for 16: a padded step costs what its draft costs, so a fixed-shape
model drafts as much as it may. In the other formats the kernels give a row the same bits whatever
the count (`attention`, `block_kernel`, `weights`), and padding would only cost.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import torch

from . import attention, decoder, weights
from .draft_length import AdaptiveDraftLength, FixedDraftLength
from .drafters import Context, Drafter
from .kv_cache import preallocated_cache
from .prefix_cache import PrefixCache, restore


# Rows of every decode step where shapes are fixed, by device: a draft of up to 63 (31) tokens and its
# token (the tuned ceilings are 24 and 32).
STEP_ROWS = {"cuda": 64, "cpu": weights.PADDED_ROWS}
PROMPT_ROWS = 256  # rows of every prefill forward where shapes are fixed


def fixed_shapes(model) -> bool:
    """Whether the model's forwards are padded to fixed shapes (see the module's docstring)."""
    return model.device.type == "cuda" or model.dtype == torch.bfloat16


def padded(count: int, rows: int) -> int:
    """`count` rounded up to a multiple of `rows`."""
    return -(-count // rows) * rows


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k filter
    top_p: float = 1.0
    seed: int | None = None


@dataclass
class Step:
    tokens: list[int]  # accepted tokens, EOS excluded
    sources: list[int | None]  # context position each token was copied from
    drafted: int
    accepted: int  # drafted tokens the model accepted
    seconds: float
    finished: str | None = None  # "eos" or "length" when this step ends generation


def forward(model, ids: list[int], cache, hidden: bool, logits_to_keep: int):
    with torch.inference_mode():
        fed = torch.tensor([ids], device=model.device)
        if decoder.fits(model):
            return decoder.forward(model, fed, cache, hidden, logits_to_keep)
        return model(input_ids=fed, cache=cache, use_cache=True, output_hidden_states=hidden,
                     logits_to_keep=logits_to_keep)


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


def start(model, prompt: list[int], capacity: int, layers: tuple[int, ...]) -> Context:
    """A generation's context for up to `capacity` positions: the prompt's tokens, an empty KV cache."""
    return Context.start(prompt, capacity, layers, model.config.get_text_config().hidden_size, model.dtype,
                         model.device, preallocated_cache(model, capacity))


def prefill(model, ids: list[int], context: Context, prefixes: PrefixCache | None, chunk: int = 0,
            turn=contextlib.nullcontext, cancel: threading.Event | None = None) -> int:
    """Fill the context's KV cache and hidden rows for positions 0..len(ids)-1: the longest prefix that
    `prefixes` holds is restored (never all of it, so one forward runs), the rest computed, and the
    whole stored back. With `chunk`, forwards of that many tokens, each inside `turn()` (so a caller
    can let other work run between them) until `cancel` is set. Where every product computes a row
    alike whatever the rows (`weights.rows_alike`), forwards of at most attention.FEW tokens, whose
    attention is row-exact too: a prompt then gets the same bits whether it is prefilled at once, in a
    warm buffer's pieces or after a reused prefix. Returns the positions filled."""
    layers = tuple(context.hidden)
    fixed = fixed_shapes(model)
    chunk = PROMPT_ROWS if fixed else chunk or (attention.FEW if weights.rows_alike(model) else 0)
    reused = 0
    if prefixes is not None:
        snapshot, reused = prefixes.lookup(ids, layers)
        reused = max(0, min(reused, len(ids) - 1))
        reused -= reused % PROMPT_ROWS if fixed else 0
        if reused > 0:
            restore(snapshot, reused, context.cache, context.hidden)
    done = reused
    while done < len(ids) and not (cancel is not None and cancel.is_set()):
        with turn():
            part = ids[done:done + chunk] if chunk else ids[done:]
            rows = chunk if fixed else len(part)
            out = forward(model, part + part[-1:] * (rows - len(part)), context.cache, bool(layers), 1)
            context.cache.crop(len(part) - rows)
            context.store_hidden(out.hidden_states or (), done, len(part))
            done += len(part)
            if prefixes is not None and done == len(ids):
                prefixes.store(ids, context.cache, context.hidden)
    return done


def warm(model, ids: list[int], layers: tuple[int, ...], prefixes: PrefixCache, chunk: int, turn,
         cancel: threading.Event | None = None) -> int:
    """Prefill `ids` into `prefixes` alone, `chunk` tokens per turn: what a later prompt starting with
    them restores instead of computing. Returns the positions computed or restored."""
    capacity = padded(len(ids), PROMPT_ROWS) if fixed_shapes(model) else len(ids)
    return prefill(model, ids, start(model, ids, capacity, layers), prefixes, chunk, turn, cancel)


def step(model, context: Context, drafter: Drafter, k: int, sampling: Sampling,
         generator: torch.Generator) -> tuple[list[int], int, list[int]]:
    """One forward pass: draft up to `k` tokens, verify them, accept.

    Feeds [x[n-1], d_1..d_k], keeps the longest prefix of the draft that the model agrees with
    plus one token of its own, appends those to the context and crops the KV cache back to them,
    so the invariant holds again. Where shapes are fixed, k must be under the step's rows. Returns
    (the draft, the position it was copied after, the accepted tokens)."""
    n = context.n
    draft, origin = drafter.propose(context, k)
    fed = [int(context.tokens[n - 1])] + draft
    rows = STEP_ROWS[model.device.type] if fixed_shapes(model) else len(fed)
    out = forward(model, fed + fed[-1:] * (rows - len(fed)), context.cache, bool(drafter.layers), rows)
    logits = out.logits[0, :len(fed)]
    if sampling.temperature > 0:
        accepted, bonus = verify_sampled(logits, draft, sampling, generator)
    else:
        accepted, bonus = verify_greedy(logits, draft)
    context.cache.crop(accepted + 1 - rows)  # negative: how many rejected (and padding) positions to drop
    context.store_hidden(out.hidden_states or (), n - 1, accepted + 1)
    context.append(draft[:accepted] + [bonus])
    return draft, origin, draft[:accepted] + [bonus]


def copied_sources(context: Context, origin: int, accepted: int, previous: int | None) -> list[int | None]:
    """The context position each token of a step (the last accepted+1 of the context) was copied from.

    The accepted draft tokens follow `origin`. The model's own token still counts as copied when it
    is what follows the last copy: the last accepted one, or `previous`, the source of the token
    the step was fed (which may itself be a token accepted in this step)."""
    sources = [origin + 1 + i for i in range(accepted)]
    last = sources[-1] if sources else previous
    follows = last is not None and context.tokens[last + 1] == context.tokens[context.n - 1]
    return sources + [last + 1 if follows else None]


def trimmed(tokens: list[int], sources: list[int | None], eos: frozenset[int],
            room: int) -> tuple[list[int], list[int | None], str | None]:
    """A step's tokens (and their sources) cut before the first EOS and to the `room` left, and why
    generation ends with them: "eos", "length", or None when it goes on."""
    finished = None
    if eos.intersection(tokens):
        cut = next(i for i, t in enumerate(tokens) if t in eos)
        tokens, sources, finished = tokens[:cut], sources[:cut], "eos"
    if len(tokens) >= room:
        tokens, sources, finished = tokens[:room], sources[:room], finished or "length"
    return tokens, sources, finished


def decode(model, prompt: list[int], drafter: Drafter, *, max_new_tokens: int,
           draft_tokens: int | AdaptiveDraftLength, sampling: Sampling = Sampling(), eos: frozenset[int] = frozenset(),
           cancel: threading.Event | None = None, prefixes: PrefixCache | None = None) -> Iterator[Step]:
    """Yield one Step per forward pass until EOS, `max_new_tokens`, or `cancel` is set.

    With `prefixes`, the longest prompt prefix seen recently is restored instead of recomputed
    (never all of it: the last prefilled position is recomputed so there is something to feed).
    """
    if cancel is not None and cancel.is_set():
        return  # cancelled while waiting its turn: no cache, no prefill beside the generation that runs
    draft_length = FixedDraftLength(draft_tokens) if isinstance(draft_tokens, int) else draft_tokens
    fixed = fixed_shapes(model)
    step_rows = STEP_ROWS[model.device.type] if fixed else draft_length.most + 1
    prompt_rows = padded(len(prompt), PROMPT_ROWS) if fixed else len(prompt)
    context = start(model, prompt, max(prompt_rows, len(prompt) + max_new_tokens + step_rows), drafter.layers)
    generator = torch.Generator().manual_seed(sampling.seed if sampling.seed is not None else 0)
    prefill(model, prompt[:-1], context, prefixes)
    sources: list[int | None] = [None] * len(prompt)
    produced = 0
    while produced < max_new_tokens and not (cancel and cancel.is_set()):
        started = time.perf_counter()
        k = min(draft_length.choose(), max_new_tokens - produced - 1, step_rows - 1)
        draft, origin, tokens = step(model, context, drafter, k, sampling, generator)
        accepted = len(tokens) - 1
        draft_length.update(len(draft), accepted)
        copied = copied_sources(context, origin, accepted, sources[-1])
        tokens, copied, finished = trimmed(tokens, copied, eos, max_new_tokens - produced)
        sources += copied
        produced += len(tokens)
        yield Step(tokens, copied, len(draft), accepted, time.perf_counter() - started, finished)
        if finished:
            return
