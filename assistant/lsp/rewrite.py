"""The state of one rewrite of one document: where its target lies now, what it has written, and
which output came from where.

Offsets here are string offsets into `known`, the text we believe the editor holds; `follow`
moves everything onto the editor's current text, so typing elsewhere shifts the target and
typing inside it makes the target stop holding (the rewrite must then stop, never overwrite).
Positions sent to the editor count units of the negotiated position encoding.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from lsprotocol import types

from assistant.lsp import ranges

BARE_LF = re.compile(r"(?<!\r)\n")


@dataclass
class Rewrite:
    uri: str
    original: str  # the whole document when the rewrite started: attribution sources point into it
    start: int
    end: int
    encoding: str = ranges.UTF16
    id: str = ""  # names this rewrite in accept / reject / cancel
    cancel: threading.Event = field(default_factory=threading.Event)
    known: str = ""
    running: bool = True
    held: bool = True  # false once the user edited the target
    closed: bool = False
    editing: bool = False  # an applyEdit of ours is in flight: the editor's text is between two states
    undo: str | None = None  # the text `reject` puts back; None once accepted (or no longer possible)
    written: bool = False  # an edit of ours landed in the buffer
    refused: str | None = None  # why the editor would not take our edits, when it would not
    restored: bool = False  # the answer did not finish and the target's original text is back
    spans: list[tuple[int, int, int, int]] = field(default_factory=list)  # output range -> original range
    target: str = field(init=False, default="")  # the target's text when the rewrite started
    ends_line: bool = field(init=False, default=False)  # the target ends with a line break
    crlf: bool = field(init=False, default=False)  # every line of the document ends with \r\n

    def __post_init__(self):
        self.known = self.known or self.original
        self.undo = self.target = self.original[self.start:self.end]
        self.ends_line = self.target.endswith("\n")
        self.crlf = "\r\n" in self.original and self.original.count("\r\n") == self.original.count("\n")

    def shown(self, output: str) -> str:
        """What goes over the target: `output` with the document's line endings (an editor keeps a
        CRLF buffer's endings, so a bare \\n would come back as a change), keeping the target's final
        line break while the output lacks one. Otherwise partial output would join the line after the
        target, and Neovim, whose buffers always end with a line break, would add its own, which then
        outlives the rewrite."""
        if self.crlf:
            output = BARE_LF.sub("\r\n", output)
        if self.ends_line and not output.endswith("\n"):
            output += "\r\n" if self.crlf else "\n"
        return output

    def shown_offset(self, output: str):
        """Map an offset into the engine's `output` to its offset in `shown(output)`."""
        bare = [m.start() for m in BARE_LF.finditer(output)] if self.crlf else []
        return lambda offset: offset + bisect_left(bare, offset)

    def follow(self, current: str) -> None:
        """Move the target and the attribution spans onto `current`, dropping what no longer holds."""
        if self.editing or current == self.known:
            return
        edits = ranges.changes(self.known, current)
        try:
            self.start, self.end = ranges.map_range(self.start, self.end, edits)
        except ranges.Conflict:
            self.held = False
            self.undo = None
        kept = []
        for a, b, c, d in self.spans:
            try:
                kept.append((*ranges.map_range(a, b, edits), c, d))
            except ranges.Conflict:
                pass
        self.spans = kept
        self.known = current

    def wrote(self, output: str, expected: str, token_spans) -> None:
        """Our edit putting `shown(output)` over the target landed; `expected` is the document now."""
        shown, at = self.shown(output), self.shown_offset(output)
        self.known, self.written = expected, True
        self.end = self.start + len(shown)
        self.spans = [(self.start + at(s.output[0]), self.start + at(s.output[1]), *s.source) for s in token_spans
                      if s.source is not None and s.output[1] <= len(output) and s.source[1] <= len(self.original)]

    def spans_at(self, offset: int) -> list[tuple[int, int, int, int]]:
        """The span holding `offset`: spans are sorted and apart, so a bisection finds it."""
        index = bisect_right(self.spans, offset, key=lambda span: span[0]) - 1
        return [self.spans[index]] if index >= 0 and offset < self.spans[index][1] else []

    def attribution(self, version: int | None) -> dict:
        """The `assistant/attribution` notification: output ranges in the current text, sources in the original."""
        outputs = ranges.lines(self.known, self.encoding).positions([o for a, b, *_ in self.spans for o in (a, b)])
        sources = ranges.lines(self.original, self.encoding).positions([o for *_, c, d in self.spans for o in (c, d)])
        return {"uri": self.uri, "version": version,
                "spans": [{"output": ranges.to_json(types.Range(outputs[2 * i], outputs[2 * i + 1])),
                           "source": ranges.to_json(types.Range(sources[2 * i], sources[2 * i + 1]))}
                          for i in range(len(self.spans))]}

    def range_at(self, start: int, end: int) -> types.Range:
        """A range of the current text, in the client's position encoding."""
        return ranges.range_at(self.known, start, end, self.encoding)

    def describe(self, span: tuple[int, int, int, int]) -> str:
        """Hover text: where an output piece was copied from, with the source snippet."""
        index = ranges.lines(self.original, self.encoding)
        first, last = index.line_of(span[2]) + 1, index.line_of(span[3]) + 1
        lines = f"line {first}" if first == last else f"lines {first}–{last}"
        snippet = self.original[span[2]:span[3]]
        return f"copied from {lines} of the original\n\n```\n{snippet}\n```"

