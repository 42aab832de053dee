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
running totals cover the pieces before it. `stitched` is that stitching alone, for any disjoint parts of
a region: engine/definitions.py rewrites a file's definitions with it, each pass's answer judged before
it is shown and the definition kept as it was where the answer is refused.
"""

from __future__ import annotations

import re
import threading
from contextlib import closing
from dataclasses import replace
from typing import Callable, Iterable, Iterator

from assistant.engine.events import Delta, Event, Result, Stats
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
    parts = [part for part in (core(document, piece) for piece in pieces) if part[0] < part[1]]  # whitespace: kept
    passes = [(part, one_pass(part)) for part in parts]
    return stitched(document, region, passes, cancel, pieces)


def stitched(document: str, region: Piece, passes: Iterable[tuple[Piece, Iterator[Event]]],
             cancel: threading.Event | None, pieces: list[Piece], take: Callable[[Piece, Result], bool] | None = None,
             names: tuple[str, str] = ("", "")) -> Iterator[Event]:
    """One event stream whose output is the new `region`: each pass's answer in place of its part (in order,
    disjoint), the text between them kept. With `take`, a pass's Deltas are held until its Result, and a part
    whose Result `take` refuses is kept as it was (that pass then counts as finished): no half-made part is
    ever shown. `names`: the model and weights a Result names when no pass ran."""
    stitch, at, cut = Stitch(document), region[0], False
    for part, events in passes:
        if at < part[0]:
            yield stitch.keep(at, part[0])
        yield from stitch.add(part, events, take, cancel)
        at = part[1]
        if cancel is not None and cancel.is_set():
            cut = True
            break
    if not cut and at < region[1]:
        yield stitch.keep(at, region[1])
    model, weights = (stitch.results[0].model, stitch.results[0].weights) if stitch.results else names
    yield Result(stitch.text, merge_spans(stitch.shown), stitch.totals(), stopped(stitch.reasons, cut), model, weights,
                 stitch.shown, pieces)


class Stitch:
    """The new region as it is made: its text, the spans of what it shows, and the passes' Results."""

    def __init__(self, document: str):
        self.document, self.text = document, ""
        self.shown: list[Span] = []
        self.results: list[Result] = []
        self.reasons: list[str] = []  # why each pass stopped, as the region's answer counts it

    def totals(self, *more: Stats) -> Stats:
        return combined([r.stats for r in self.results] + list(more))

    def keep(self, start: int, end: int) -> Delta:
        """The document's text from `start` to `end`, attributed to where it stands: a verbatim copy."""
        kept = self.document[start:end]
        span = Span((len(self.text), len(self.text) + len(kept)), (start, end))
        self.text += kept
        self.shown.append(span)
        return Delta(kept, [span], 0, 0, 0, 0.0, self.totals())

    def put(self, event: Delta, base: int) -> Delta:
        """A Delta of the pass whose answer starts at `base`, its spans (in that answer) shifted to the region."""
        tokens = [shifted(span, base) for span in event.tokens]
        self.shown += tokens
        self.text += event.text
        return replace(event, tokens=tokens, totals=self.totals(event.totals))

    def add(self, part: Piece, events: Iterator[Event], take: Callable[[Piece, Result], bool] | None,
            cancel: threading.Event | None) -> Iterator[Event]:
        """A pass's events for `part`: as they come, or, with `take`, its Deltas held until `take` judges."""
        held, result, base = [], None, len(self.text)
        with closing(events):
            for event in events:
                if isinstance(event, Result):
                    result = event
                elif isinstance(event, Delta):
                    if take is None:
                        yield self.put(event, base)
                    else:
                        held.append(event)
                else:
                    yield event
        cancelled = cancel is not None and cancel.is_set()
        taken = take is None or cancelled or (result is not None and take(part, result))
        yield from [self.put(event, base) for event in held] if taken else [self.keep(*part)]
        if result is not None:
            self.results.append(result)
            self.reasons.append(result.stopped if taken else "eos")


def shifted(span: Span, by: int) -> Span:
    return Span((span.output[0] + by, span.output[1] + by), span.source)


def combined(parts: list[Stats]) -> Stats:
    def total(name: str):
        return sum(getattr(part, name) for part in parts)
    return Stats(total("new_tokens"), total("steps"), total("seconds"), total("prompt_tokens"), total("drafted"),
                 total("accepted"), parts[0].first_token_seconds if parts else 0.0)


def stopped(reasons: list[str], cut: bool) -> str:
    """The most telling reason among the passes' (`cut`: the stream ended before its end): a cancel or a cut
    beats a natural end."""
    if "cancelled" in reasons or cut:
        return "cancelled"
    return "length" if "length" in reasons else ("stop" if "stop" in reasons else "eos")
