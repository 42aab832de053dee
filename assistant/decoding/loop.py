"""The decode loop: draft, verify the draft in one forward pass, keep exactly what plain decoding keeps.

Invariant between steps: the context holds n tokens, the KV cache and the stored hidden states
cover positions 0..n-2, and x[n-1] is the token chosen last, not yet fed. A step feeds
[x[n-1], d_1..d_k], accepts the longest prefix of the draft that the model agrees with plus one
token of its own, and crops the cache back to what was accepted. Greedy verification is
token-identical to plain decoding; sampled verification accepts d_i with the model's
probability p(d_i) and otherwise samples from p with d_i removed, which keeps the model's
distribution exactly (the draft is a point mass). With several branches, a greedy step feeds a
token tree of the best-ranked candidates' continuations instead (`decoding.tree`) and keeps the
longest path greedy decoding follows, the cache holding that path's rows alone afterwards.

Every forward follows the row rules of `model.exactness`, so a verified draft sees the bits a
one-token step would.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import torch

from assistant.decoding.draft_length import AdaptiveDraftLength, FixedDraftLength
from assistant.decoding.drafters import Context, Drafter
from assistant.decoding.prefix_cache import PrefixCache, restore
from assistant.decoding.tree import TokenTree, grow
from assistant.decoding.verification import Sampling, verify_greedy, verify_sampled, verify_tree_greedy
from assistant.model import exactness, transformer, tree_attention
from assistant.model.kv_cache import preallocated_cache


@dataclass
class Step:
    tokens: list[int]  # accepted tokens, EOS excluded
    sources: list[int | None]  # context position each token was copied from
    drafted: int  # draft tokens verified (a token tree's rows but its root)
    accepted: int  # drafted tokens the model accepted
    seconds: float
    finished: str | None = None  # "eos" or "length" when this step ends generation


def forward(model, ids: list[int], cache, hidden: bool, logits_to_keep: int, tree: tree_attention.Tree | None = None,
            head: bool = True):
    """One forward of `ids` after the cache's positions; a token tree's rows (`tree`) where `tree_fits`. Without
    `head`, our forward (`transformer.fits`) computes no logits: for a prefill, which reads none."""
    with torch.inference_mode():
        fed = torch.tensor([ids], device=model.device)
        if transformer.fits(model):
            return transformer.forward(model, fed, cache, hidden, logits_to_keep, tree, head)
        return model(input_ids=fed, cache=cache, use_cache=True, output_hidden_states=hidden,
                     logits_to_keep=logits_to_keep)


def start(model, prompt: list[int], capacity: int, layers: tuple[int, ...],
          eos: frozenset[int] = frozenset()) -> Context:
    """A generation's context for up to `capacity` positions: the prompt's tokens, an empty KV cache, and the
    tokens that end it (no draft copies past one)."""
    return Context.start(prompt, capacity, layers, model.config.get_text_config().hidden_size, model.dtype,
                         model.device, preallocated_cache(model, capacity), eos)


def prefill(model, ids: list[int], context: Context, prefixes: PrefixCache | None, chunk: int = 0,
            turn=contextlib.nullcontext, cancel: threading.Event | None = None) -> int:
    """Fill the context's KV cache and hidden rows for positions 0..len(ids)-1: the longest prefix that
    `prefixes` holds is restored (never all of it, so one forward runs), the rest computed, and the
    whole stored back. With `chunk`, forwards of that many tokens, each inside `turn()` (so a caller
    can let other work run between them) until `cancel` is set. Where every product computes a row
    alike whatever the rows (`exactness.alike`), forwards of at most exactness.FEW tokens, whose
    attention is row-exact too: a prompt then gets the same bits whether it is prefilled at once, in a
    warm buffer's pieces or after a reused prefix. Returns the positions filled."""
    layers = tuple(context.hidden)
    fixed = exactness.fixed_shapes(model)
    chunk = exactness.PROMPT_ROWS if fixed else chunk or (exactness.FEW if exactness.alike(model) else 0)
    reused = 0
    if prefixes is not None:
        snapshot, reused = prefixes.lookup(ids, layers)
        reused = max(0, min(reused, len(ids) - 1))
        reused -= reused % exactness.PROMPT_ROWS if fixed else 0
        if reused > 0:
            restore(snapshot, reused, context.cache, context.hidden)
    done = reused
    while done < len(ids) and not (cancel is not None and cancel.is_set()):
        with turn():
            part = ids[done:done + chunk] if chunk else ids[done:]
            rows = chunk if fixed else len(part)
            out = forward(model, part + part[-1:] * (rows - len(part)), context.cache, bool(layers), 1, head=False)
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
    capacity = exactness.padded(len(ids), exactness.PROMPT_ROWS) if exactness.fixed_shapes(model) else len(ids)
    return prefill(model, ids, start(model, ids, capacity, layers), prefixes, chunk, turn, cancel)


def step(model, context: Context, draft: list[int], hidden: bool, sampling: Sampling,
         generator: torch.Generator) -> list[int]:
    """One forward pass: verify a draft, accept.

    Feeds [x[n-1], d_1..d_k], keeps the longest prefix of the draft that the model agrees with
    plus one token of its own, appends those to the context and crops the KV cache back to them,
    so the invariant holds again (with `hidden`, the hidden rows too). Where shapes are fixed, k must
    be under the step's rows. Returns the accepted tokens."""
    fed = fed_rows(context, draft)
    rows = exactness.STEP_ROWS[model.device.type] if exactness.fixed_shapes(model) else len(fed)
    out = forward(model, fed + fed[-1:] * (rows - len(fed)), context.cache, hidden, rows)
    return accept(context, draft, out.logits[0, :len(fed)], out.hidden_states or (), rows, sampling, generator)


def fed_rows(context: Context, draft: list[int]) -> list[int]:
    """The tokens a step feeds to verify `draft`: the token chosen last, then the draft."""
    return [int(context.tokens[context.n - 1])] + draft


def accept(context: Context, draft: list[int], logits: torch.Tensor, states: tuple[torch.Tensor, ...], rows: int,
           sampling: Sampling, generator: torch.Generator) -> list[int]:
    """The end of a step whose forward fed `rows` rows (the draft's and any padding) after the context and gave
    the draft's `logits` and hidden `states`: the accepted tokens appended to the context, the cache cropped
    back to them and their hidden rows kept. Returns the accepted tokens."""
    if sampling.temperature > 0:
        accepted, bonus = verify_sampled(logits, draft, sampling, generator)
    else:
        accepted, bonus = verify_greedy(logits, draft)
    context.cache.crop(accepted + 1 - rows)  # negative: how many rejected (and padding) positions to drop
    context.store_hidden(states, context.n - 1, accepted + 1)
    context.append(draft[:accepted] + [bonus])
    return draft[:accepted] + [bonus]


def tree_fits(model, context: Context, rows: int) -> bool:
    """Whether a token tree of `rows` rows can be verified in one forward of `model` now: our forward
    (`transformer.fits`) and `tree_attention.takes`."""
    return transformer.fits(model) and tree_attention.takes(model, context.cache, rows)


def tree_step(model, context: Context, tree: TokenTree, hidden: bool) -> tuple[list[int], int]:
    """One forward pass over a token tree (greedy): the longest path from its root that greedy decoding
    follows, and the model's next token, appended to the context; the KV cache (and with `hidden` the hidden
    rows) then hold the path's rows alone, as a chain's step would leave them. Returns (the accepted tokens,
    the origin of the path's last row: the best-ranked branch through it)."""
    n = context.n
    rows = tree_attention.Tree.of(tree.parents)
    out = forward(model, tree.tokens, context.cache, hidden, len(tree.tokens), rows)
    path, bonus = verify_tree_greedy(out.logits[0], tree.children)
    tree_attention.keep(rows, context.cache, path)
    context.store_hidden(tuple(state[:, path] for state in out.hidden_states or ()), n - 1, len(path))
    tokens = [tree.tokens[row] for row in path[1:]] + [bonus]
    context.append(tokens)
    return tokens, tree.origins[path[-1]] if len(path) > 1 else tree.best


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


@dataclass
class Generation:
    """One generation's state between its steps: its context, how it drafts, and what it has made."""

    context: Context
    drafter: Drafter
    draft_length: AdaptiveDraftLength | FixedDraftLength
    step_rows: int  # the most rows a step feeds: its draft and its token (padded to them where shapes are fixed)
    max_new_tokens: int
    sampling: Sampling
    generator: torch.Generator
    sources: list[int | None]  # the context position each context position was copied from
    produced: int = 0

    @property
    def left(self) -> int:
        return self.max_new_tokens - self.produced


def begin(model, prompt: list[int], drafter: Drafter, *, max_new_tokens: int,
          draft_tokens: int | AdaptiveDraftLength, sampling: Sampling = Sampling(), eos: frozenset[int] = frozenset(),
          prefixes: PrefixCache | None = None) -> Generation:
    """A generation of `prompt` ready for its first step, its prompt prefilled: the context holds the prompt,
    `max_new_tokens` and one step's rows, so no draft runs past its end (`decode` has the rest)."""
    draft_length = FixedDraftLength(draft_tokens) if isinstance(draft_tokens, int) else draft_tokens
    fixed = exactness.fixed_shapes(model)
    step_rows = exactness.STEP_ROWS[model.device.type] if fixed else min(draft_length.most,
                                                                         exactness.longest_draft(model)) + 1
    prompt_rows = exactness.padded(len(prompt), exactness.PROMPT_ROWS) if fixed else len(prompt)
    context = start(model, prompt, max(prompt_rows, len(prompt) + max_new_tokens + step_rows), drafter.layers, eos)
    generator = torch.Generator().manual_seed(sampling.seed if sampling.seed is not None else 0)
    prefill(model, prompt[:-1], context, prefixes)
    return Generation(context, drafter, draft_length, step_rows, max_new_tokens, sampling, generator,
                      [None] * len(prompt))


def decode(model, prompt: list[int], drafter: Drafter, *, max_new_tokens: int,
           draft_tokens: int | AdaptiveDraftLength, sampling: Sampling = Sampling(), eos: frozenset[int] = frozenset(),
           cancel: threading.Event | None = None, prefixes: PrefixCache | None = None,
           branches: int = 1) -> Iterator[Step]:
    """Yield one Step per forward pass until EOS, `max_new_tokens`, or `cancel` is set.

    A draft is cut to the tokens left (it never reaches past `max_new_tokens`) and to the rows one
    forward computes alike (`exactness.longest_draft`); the context holds the prompt, `max_new_tokens`
    and one step's rows, so no draft runs past its end.

    With `prefixes`, the longest prompt prefix seen recently is restored instead of recomputed
    (never all of it: the last prefilled position is recomputed so there is something to feed). With
    `branches` > 1, greedy steps verify that many candidates' continuations together (`verified`).
    """
    if cancel is not None and cancel.is_set():
        return  # cancelled while waiting its turn: no cache, no prefill beside the generation that runs
    generation = begin(model, prompt, drafter, max_new_tokens=max_new_tokens, draft_tokens=draft_tokens,
                       sampling=sampling, eos=eos, prefixes=prefixes)
    while generation.left > 0 and not (cancel and cancel.is_set()):
        done = next_step(model, generation, branches)
        yield done
        if done.finished:
            return


def next_step(model, generation: Generation, branches: int = 1) -> Step:
    """One step of `decode` with tokens still to make: a draft of the chosen length cut to the tokens left and to
    the step's rows, verified and accepted (`verified`), then `settled`. Its `seconds` are the whole step's,
    forward and everything around it."""
    started = time.perf_counter()
    tokens, origin, drafted, branch = verified(model, generation, draft_size(generation), branches)
    return settled(generation, tokens, origin, drafted, branch, started)


def draft_size(generation: Generation) -> int:
    """How many tokens a generation's next step drafts: the length its draft length chooses, cut to the tokens
    left (its own token takes one) and to the step's rows."""
    return min(generation.draft_length.choose(), generation.left - 1, generation.step_rows - 1)


def settled(generation: Generation, tokens: list[int], origin: int, drafted: int, branch: int,
            started: float) -> Step:
    """A step's accepted `tokens` (copied after `origin`, `drafted` verified) made a Step begun at `started`: the
    draft length told what its accepted branch (of `branch` tokens) got, the tokens kept cut at EOS and at the
    tokens left, their sources appended to the generation's."""
    accepted = len(tokens) - 1
    generation.draft_length.update(branch, accepted)
    copied = copied_sources(generation.context, origin, accepted, generation.sources[-1])
    tokens, copied, finished = trimmed(tokens, copied, generation.context.eos, generation.left)
    generation.sources += copied
    generation.produced += len(tokens)
    return Step(tokens, copied, drafted, accepted, time.perf_counter() - started, finished)


def verified(model, generation: Generation, k: int, branches: int) -> tuple[list[int], int, int, int]:
    """A step's forward: with `branches` > 1, greedy decoding and a tree that fits the step's rows and the context
    (`tree_fits`), the continuations of up to `branches` best-ranked candidates as a token tree (`tree_step`);
    else, or where the tree has one branch, the drafter's chain (`step`). Returns (the accepted tokens, the
    origin they were copied after, the draft tokens verified, the length of the accepted branch's draft)."""
    context, drafter, sampling = generation.context, generation.drafter, generation.sampling
    hidden = bool(drafter.layers)
    rows = min(generation.step_rows, len(context.tokens) - (context.n - 1))
    if branches > 1 and sampling.temperature == 0 and k > 0 and tree_fits(model, context, rows):
        tree = grow(context, drafter.rank(context), k, branches, rows)
        if tree.branches > 1:
            tokens, origin = tree_step(model, context, tree, hidden)
            return tokens, origin, len(tree.tokens) - 1, tree.drafts[origin]
        draft, origin = tree.first()
    else:
        draft, origin = drafter.propose(context, k)
    return step(model, context, draft, hidden, sampling, generation.generator), origin, len(draft), len(draft)
