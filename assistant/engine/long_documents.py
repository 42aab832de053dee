"""Rewriting documents longer than the model's context: split, rewrite piece by piece, stitch.

A document (or a region of it) whose prompt would not leave room for the answer is cut at
natural boundaries (after blank lines, before top-level definitions and headings) into pieces
that each fit. Every piece is rewritten as an engine *selection*, so the model sees its
neighbours as read-only context, and the answers are concatenated back in order.

Only a piece's text between its first and last non-blank character goes to the model: the
whitespace around it (the seams) is kept verbatim, because models tend to drop leading and
trailing newlines and the seams would otherwise fuse.

The engine (`Assistant.rewrite`) plans and calls this for every front door, with one output
budget (`answer_budget`, here because `plan` inverts it). `rewrite` yields the engine's own
events: Deltas whose texts, joined, are the new region (the whole document or the selection),
with output offsets in that new text and source offsets in the whole old document, then one
Result for the region whose `stopped` is "length" or "cancelled" if any piece did not finish.
Kept text comes as Deltas without new tokens whose span attributes it to its own place in the
document (it is a verbatim copy); the stats count generated tokens only, and every Delta's
running totals cover the pieces before it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from typing import Callable, Iterator

from assistant.engine.events import Delta, Event, Queued, Result, Stats
from assistant.engine.output import Span, merge_spans

ANSWER_ROOM, ANSWER_EXTRA = 2, 64  # output budget: twice the text to rewrite, plus a little

# A line that starts a top-level definition, a heading or a decorator: a good place to cut before.
TOP_LEVEL = re.compile(r"(def |class |async def |@|#|function |fn |pub |impl |struct |func |[A-Za-z_][\w.]* = )")

Piece = tuple[int, int]


def answer_budget(target_tokens: int) -> int:
    """The most new tokens a rewrite of `target_tokens` may need: the one budget every pass and plan uses."""
    return ANSWER_ROOM * target_tokens + ANSWER_EXTRA


def lines_of(text: str, start: int, end: int) -> list[Piece]:
    """The (start, end) of every line in text[start:end], newline included."""
    lines, at = [], start
    while at < end:
        stop = text.find("\n", at, end)
        stop = end if stop < 0 else stop + 1
        lines.append((at, stop))
        at = stop
    return lines


def is_boundary(text: str, line: Piece, previous: Piece) -> bool:
    """Whether a piece may well start at `line`: after a blank line or at a top-level definition."""
    return not text[previous[0]:previous[1]].strip() or bool(TOP_LEVEL.match(text, line[0]))


def split(text: str, count_tokens: Callable[[str], int], max_piece_tokens: int,
          region: Piece | None = None) -> list[Piece]:
    """Cut `region` of `text` (all of it by default) into consecutive pieces of at most
    `max_piece_tokens` tokens each, preferring natural boundaries; a single line longer than
    that becomes a piece of its own. The pieces cover the region exactly, in order."""
    start, end = region or (0, len(text))
    lines = lines_of(text, start, end)
    sizes = [count_tokens(text[a:b]) for a, b in lines]  # per line: a piece's size is about their sum
    pieces, first = [], 0
    while first < len(lines):
        total, last, best = 0, first, None  # best: the furthest natural boundary that still fits
        while last < len(lines) and (last == first or total + sizes[last] <= max_piece_tokens):
            total += sizes[last]
            last += 1
            if last < len(lines) and is_boundary(text, lines[last], lines[last - 1]):
                best = last
        cut = best if best is not None and last < len(lines) else last
        pieces.append((lines[first][0], lines[cut - 1][1]))
        first = cut
    return pieces


def core(text: str, piece: Piece) -> Piece:
    """The piece without its leading and trailing whitespace (empty when it is all whitespace)."""
    start, end = piece
    chunk = text[start:end]
    stripped = chunk.strip()
    if not stripped:
        return start, start
    head = start + chunk.index(stripped)
    return head, head + len(stripped)


def plan(document: str, region: Piece, *, context_length: int, count_tokens: Callable[[str], int],
         prompt_tokens: Callable[[Piece | None], int], max_piece_tokens: int | None = None) -> list[Piece]:
    """The pieces of `region` to rewrite: the whole region when its prompt and answer fit the context,
    else a split. `prompt_tokens(piece)` sizes the prompt that rewrites `piece` (None: the region)."""
    region_tokens = count_tokens(document[region[0]:region[1]])
    if max_piece_tokens is None:
        if prompt_tokens(None) + answer_budget(region_tokens) <= context_length:
            return [region]
        # Everything in a piece's prompt but the piece: instruction, template and the neighbours shown.
        overhead = prompt_tokens((len(document) // 2, len(document) // 2 + 1))
        max_piece_tokens = max(16, (context_length - overhead - ANSWER_EXTRA) // (1 + ANSWER_ROOM))  # answer_budget inverted
    if region_tokens <= max_piece_tokens:
        return [region]
    return split(document, count_tokens, max_piece_tokens, region)


def rewrite(document: str, region: Piece, pieces: list[Piece],
            one_pass: Callable[[Piece], Iterator[Event]], cancel: threading.Event | None) -> Iterator[Event]:
    """Rewrite `pieces` (from `plan`) of `region`, each with `one_pass`, keeping the seams, as one event stream
    whose output is the new `region`. A bad request raises RewriteError before anything is yielded."""
    requests = []  # (where the kept text before the piece starts, that text, the piece's event stream)
    at = region[0]
    for piece in pieces:
        start, end = core(document, piece)
        if start == end:
            continue  # whitespace only: kept as it is
        requests.append((at, document[at:start], one_pass((start, end))))
        at = end
    return _stitch(requests, (at, document[at:region[1]]), cancel, pieces)


def _stitch(requests, tail: tuple[int, str], cancel, pieces) -> Iterator[Event]:
    text, shown, results = "", [], []

    def keep(start: int, kept: str) -> Delta:
        """Kept text, attributed to where it stands in the document: it is a verbatim copy."""
        nonlocal text
        span = Span((len(text), len(text) + len(kept)), (start, start + len(kept)))
        text += kept
        shown.append(span)
        return Delta(kept, [span], 0, 0, 0, 0.0, combined([r.stats for r in results]))

    try:
        for start, kept, events in requests:
            if kept:
                yield keep(start, kept)
            base = len(text)
            for event in events:
                if isinstance(event, Queued):
                    yield event
                elif isinstance(event, Delta):
                    tokens = [shifted(span, base) for span in event.tokens]
                    shown += tokens
                    text += event.text
                    yield replace(event, tokens=tokens, totals=combined([r.stats for r in results] + [event.totals]))
                else:
                    results.append(event)
            if cancel is not None and cancel.is_set():
                break
        else:
            if tail[1]:
                yield keep(*tail)
    finally:
        for _, _, events in requests:
            events.close()
    model, weights = (results[0].model, results[0].weights) if results else ("", "")
    yield Result(text, merge_spans(shown), combined([r.stats for r in results]), stopped(results, len(requests)),
                 model, weights, shown, pieces)


def shifted(span: Span, by: int) -> Span:
    return Span((span.output[0] + by, span.output[1] + by), span.source)


def combined(parts: list[Stats]) -> Stats:
    def total(name: str):
        return sum(getattr(part, name) for part in parts)
    return Stats(total("new_tokens"), total("steps"), total("seconds"), total("prompt_tokens"), total("drafted"),
                 total("accepted"), parts[0].first_token_seconds if parts else 0.0)


def stopped(results: list[Result], expected: int) -> str:
    """The most telling reason among the pieces': a cancel or a cut beats a natural end."""
    reasons = {result.stopped for result in results}
    if "cancelled" in reasons or len(results) < expected:
        return "cancelled"
    return "length" if "length" in reasons else ("stop" if "stop" in reasons else "eos")
