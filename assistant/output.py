"""Turning accepted tokens into streamed text with attribution.

Text is detokenised incrementally (a token that ends inside a multi-byte character shows
nothing until the character is complete). What the user sees is the output minus a wrapping
code fence the model may add and minus anything from a stop string on, so a short tail that
could still become a closing fence or a stop string is held back until it is decided.
"""

from __future__ import annotations

from dataclasses import dataclass

from .prompts import strip_fence

FENCE_CLOSE = "\n```"


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
    """Collects tokens with their document spans; yields what may be shown so far."""

    def __init__(self, tokenizer, document: str, stop: tuple[str, ...] = (), strip_fences: bool = True):
        self.detokenizer, self.document, self.stop = Detokenizer(tokenizer), document, stop
        self.strip_fences = strip_fences
        self.raw = ""
        self.pieces: list[tuple[int, int, tuple[int, int] | None]] = []  # raw range and source per token
        self.head: int | None = None if strip_fences else 0  # where visible text starts in raw
        self.shown = 0  # visible characters handed out
        self.shown_pieces = 0
        self.stopped = False

    @property
    def text(self) -> str:
        """Everything shown so far."""
        return self.raw[self.head or 0:(self.head or 0) + self.shown]

    def add(self, tokens: list[int], sources: list[tuple[int, int] | None]) -> tuple[str, list[Span]]:
        for token, source in zip(tokens, sources):
            piece = self.detokenizer.add(token)
            if source is not None and self.document[source[0]:source[1]] != piece:
                source = None  # attribution must name exactly the characters shown
            self.pieces.append((len(self.raw), len(self.raw) + len(piece), source))
            self.raw += piece
        if self.head is None and (self.raw[:3] != "```"[:len(self.raw[:3])] or "\n" in self.raw):
            self.head = strip_fence(self.raw)[0]
        if self.head is None:
            return "", []
        body = self.raw[self.head:]
        for marker in self.stop:
            if marker and (cut := body.find(marker)) >= 0:
                self.stopped = True
                return self._reveal(self.head + cut)
        markers = list(self.stop) + ([FENCE_CLOSE] if self.head else [])
        hold = held_back(body, markers)
        if self.head and body.rstrip().endswith(FENCE_CLOSE):  # a complete closing fence, unless more follows
            hold = max(hold, len(body) - body.rstrip().rfind(FENCE_CLOSE))
        return self._reveal(len(self.raw) - hold)

    def finish(self) -> tuple[str, list[Span]]:
        """Reveal the rest once generation has ended, dropping a closing fence."""
        if self.stopped:
            return "", []
        if self.head is None:
            self.head = strip_fence(self.raw)[0]
        return self._reveal(strip_fence(self.raw)[1] if self.head else len(self.raw))

    def _reveal(self, end: int) -> tuple[str, list[Span]]:
        visible_end = max(self.head, end) - self.head
        if visible_end <= self.shown:
            return "", []
        text = self.raw[self.head + self.shown:self.head + visible_end]
        self.shown = visible_end
        spans = []
        while self.shown_pieces < len(self.pieces):
            start, stop, source = self.pieces[self.shown_pieces]
            if stop - self.head > visible_end:
                break
            self.shown_pieces += 1
            if start >= self.head and stop > start:
                spans.append(Span((start - self.head, stop - self.head), source))
        return text, spans


def missing_final_newline(text: str, target: str, ended_by_model: bool) -> str:
    """"\n" when the model ended `text` without the newline that ends `target` (a file or whole lines).

    Models rarely write that last newline before their end-of-sequence token; keeping it means a
    rewrite does not join the file's last line with whatever follows.
    """
    return "\n" if ended_by_model and target.endswith("\n") and not text.endswith("\n") else ""


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
