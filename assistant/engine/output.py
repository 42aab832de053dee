"""Turning accepted tokens into streamed text with attribution.

Text is detokenised incrementally (a token that ends inside a multi-byte character shows
nothing until the character is complete). What the user sees is the answer up to the fence
that closes it or a stop string, so a short tail that could still become either is held back
until it is decided.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from assistant.engine.selection import Copies, Rest


@dataclass(frozen=True)
class Span:
    output: tuple[int, int]  # character range in the output text
    source: tuple[int, int] | None  # character range in the document it was copied from

    def to_json(self) -> dict:
        return {"output": list(self.output), "source": list(self.source) if self.source else None}


class Detokenizer:
    """Incremental decoding that is correct for multi-byte characters and tokenizers that drop
    a leading space when decoding from the middle of a sequence (the offsets trick of TGI/vLLM)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.prefix, self.read = tokenizer, [], 0, 0

    def add(self, token: int) -> str:
        self.ids.append(token)
        decode = self.tokenizer.decode
        before = decode(self.ids[self.prefix:self.read], skip_special_tokens=True)
        after = decode(self.ids[self.prefix:], skip_special_tokens=True)
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return after[len(before):]


def held_back(text: str, markers: list[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of a marker."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest


class OutputText:
    """Collects tokens with their document spans; yields what may be shown so far.

    The answer ends at a stop string or, when the prompt opened the answer with a code `fence`,
    at the line that closes it; the newline before that line belongs to the fence. An answer to the
    `target` range of the document ends where it starts copying the text after that range, and starts
    after a copy of the text before it; one given the `rest` of a definition ends where it starts copying
    that, which follows as it stands (engine/selection.py).
    """

    def __init__(self, tokenizer, document: str, stop: tuple[str, ...] = (), fence: str | None = None,
                 target: tuple[int, int] | None = None, rest: tuple[int, int] | None = None):
        self.detokenizer, self.document = Detokenizer(tokenizer), document
        self.copies = Copies(document, target) if target else None
        self.rest = Rest(document, rest) if rest else None
        self.skip = 0 if target is None else None  # raw characters copied from before the target (None: undecided)
        self.stop = tuple(marker for marker in stop if marker)
        self.fence = fence
        self.raw = ""
        self.pieces: list[tuple[int, int, tuple[int, int] | None]] = []  # raw range and source per token
        self.shown = 0  # characters handed out
        self.shown_pieces = 0
        self.ended: str | None = None  # "stop" at a stop string, "eos" where the answer's code block closed
        self.tokens = 0  # tokens that made the answer: up to the one that showed where it ends

    @property
    def text(self) -> str:
        """Everything shown so far."""
        return self.raw[self.skip or 0:self.shown]

    def add(self, tokens: list[int], sources: list[tuple[int, int] | None]) -> tuple[str, list[Span]]:
        for token, source in zip(tokens, sources):
            piece = self.detokenizer.add(token)
            if source is not None and self.document[source[0]:source[1]] != piece:
                source = None  # attribution must name exactly the characters shown
            self.pieces.append((len(self.raw), len(self.raw) + len(piece), source))
            self.raw += piece
        if self.ended:
            return "", []
        self.tokens = len(self.pieces)
        # (where the answer ends, why, where the text that says so ends)
        ends = [(at, "stop", at + len(marker)) for marker in self.stop if (at := self.raw.find(marker)) >= 0]
        if self.fence and (close := closing_fence(self.raw, self.fence)):
            ends.append((close[0], "eos", close[1]))
        if self.copies and (copied := self.copies.end(self.raw)):
            ends.append((copied[0], "eos", copied[1]))
        if self.rest and (rest := self.rest.end(self.raw)):
            ends.append((rest[0], "rest", rest[1]))
        if ends:
            end, self.ended, seen = min(ends)
            self.tokens = sum(start < seen for start, _, _ in self.pieces)
            if self.ended == "rest":
                end, self.ended = self._follow(end, rest[2]), "eos"
            return self._reveal(end, final=True)
        hold = held_back(self.raw, list(self.stop))
        if self.fence:
            hold = max(hold, unclosed_tail(self.raw, self.fence))
        if self.copies:
            hold = max(hold, self.copies.held(self.raw))
        return self._reveal(len(self.raw) - hold)

    def _follow(self, end: int, start: int) -> int:
        """Cut the raw text at `end`, or where it has been shown up to (a copy of the rest), and follow it with the
        definition's rest from there on (from the document offset `start` at `end`), attributed to it; the new end
        of the raw text."""
        cut = max(end, self.shown)
        start += cut - end
        rest = self.rest.after(start)
        self.pieces = [(a, min(b, cut), source if b <= cut else None) for a, b, source in self.pieces
                       if a < cut or b <= cut]
        self.pieces.append((cut, cut + len(rest), (start, start + len(rest))))
        self.raw = self.raw[:cut] + rest
        return len(self.raw)

    def finish(self) -> tuple[str, list[Span]]:
        """Reveal the rest once generation has ended, without a closing fence the model ended on."""
        if self.ended:
            return "", []
        close = closing_fence(self.raw + "\n", self.fence) if self.fence else None
        return self._reveal(close[0] if close else len(self.raw), final=True)

    def _reveal(self, end: int, final: bool = False) -> tuple[str, list[Span]]:
        """Show the raw text up to `end`, from where the answer starts (once that is decided, or `final`)."""
        if self.skip is None:
            self.skip = self.copies.start(self.raw, final)
            if self.skip is None:
                return "", []
            self.shown = self.skip
        if end <= self.shown:
            return "", []
        text = self.raw[self.shown:end]
        self.shown = end
        spans = []
        while self.shown_pieces < len(self.pieces):
            start, stop, source = self.pieces[self.shown_pieces]
            if stop > end:
                break
            self.shown_pieces += 1
            if stop > max(start, self.skip):
                cut = max(0, self.skip - start)  # a token across the copy's end: only its part after it
                spans.append(Span((start + cut - self.skip, stop - self.skip), source and (source[0] + cut, source[1])))
        return text, spans


def closing_fence(text: str, fence: str) -> tuple[int, int] | None:
    """Where in `text` the answer's code block closes: from the line break (`\n` or `\r\n`) before a line
    holding only `fence` to the end of that line. That break is the fence's: the prompt shows every text
    followed by one (its own last one, or one added), and `missing_final_newline` gives back a target's own."""
    if closed := re.search(rf"\r?\n{fence}[ \t\r]*\n", "\n" + text):  # the fence may be the first line
        return max(0, closed.start() - 1), closed.end() - 1
    return None


def unclosed_tail(text: str, fence: str) -> int:
    """How many of the last characters of `text` could still become the line that closes the block."""
    partial = re.search(rf"(\r?\n(`{{0,{len(fence) - 1}}}|{fence}[ \t\r]*)|\r)\Z", "\n" + text)
    return min(len(text), len(partial.group())) if partial else 0


_BREAKS = re.compile(r"[\r\n]*\Z")
_LAST_BREAK = re.compile(r"(\r\n|\r|\n)?\Z")


def missing_final_newline(text: str, target: str, ended_by_model: bool) -> str:
    """The line breaks that end `target` and that `text`, which the model ended, lacks: `target`'s run of
    trailing line breaks less the part of it that `text` ends with; for an empty `text` (the target
    deleted), `target`'s last line break alone. So an answer that copies its target gives back every byte.

    The line break before the closing fence is the fence's, models rarely write a last newline before their
    end of sequence, and often leave out the blank lines that end a selection; keeping them means a rewrite
    does not join its last line with whatever follows (two paragraphs, two functions).
    """
    if not ended_by_model:
        return ""
    if not text:
        return _LAST_BREAK.search(target).group()
    wanted, ending = _BREAKS.search(target).group(), _BREAKS.search(text).group()
    return wanted[len(ending):] if wanted.startswith(ending) else ""


def merge_spans(spans: list[Span]) -> list[Span]:
    """Join neighbouring attributed token spans whose sources are neighbours too."""
    merged: list[Span] = []
    for span in spans:
        if span.source is None:
            continue
        if merged and merged[-1].output[1] == span.output[0] and merged[-1].source[1] == span.source[0]:
            merged[-1] = Span((merged[-1].output[0], span.output[1]), (merged[-1].source[0], span.source[1]))
        else:
            merged.append(span)
    return merged
