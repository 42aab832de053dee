"""The state of one rewrite of one document: where its target lies now, what it has written, and
which output came from where.

Offsets here are string offsets into `known`, the text we believe the editor holds; `follow`
moves everything onto the editor's current text, so typing elsewhere shifts the target and
typing inside it makes the target stop holding (the rewrite must then stop, never overwrite).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from . import ranges


@dataclass
class Rewrite:
    uri: str
    original: str  # the whole document when the rewrite started: attribution sources point into it
    start: int
    end: int
    cancel: threading.Event = field(default_factory=threading.Event)
    known: str = ""
    running: bool = True
    held: bool = True  # false once the user edited the target
    closed: bool = False
    editing: bool = False  # an applyEdit of ours is in flight: the editor's text is between two states
    undo: str | None = None  # the text `reject` puts back; None once accepted (or no longer possible)
    spans: list[tuple[int, int, int, int]] = field(default_factory=list)  # output range -> original range
    ends_line: bool = field(init=False, default=False)  # the target ends with a line break

    def __post_init__(self):
        self.known = self.known or self.original
        self.undo = self.original[self.start:self.end]
        self.ends_line = self.undo.endswith("\n")

    def shown(self, output: str) -> str:
        """What goes over the target: `output`, keeping the target's final line break while the output
        lacks one. Otherwise partial output would join the line after the target, and Neovim, whose
        buffers always end with a line break, would add its own, which then outlives the rewrite."""
        return output + "\n" if self.ends_line and not output.endswith("\n") else output

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
        """Our edit putting `output` over the target landed; `expected` is the document now."""
        self.known = expected
        self.end = self.start + len(output)
        self.spans = [(self.start + s.output[0], self.start + s.output[1], *s.source) for s in token_spans
                      if s.source is not None and s.output[1] <= len(output) and s.source[1] <= len(self.original)]

    def spans_at(self, offset: int) -> list[tuple[int, int, int, int]]:
        return [span for span in self.spans if span[0] <= offset < span[1]]

    def attribution(self, version: int | None) -> dict:
        """The `assistant/attribution` notification: output ranges in the current text, sources in the original."""
        return {"uri": self.uri, "version": version,
                "spans": [{"output": lsp_range(self.known, a, b), "source": lsp_range(self.original, c, d)}
                          for a, b, c, d in self.spans]}

    def describe(self, span: tuple[int, int, int, int]) -> str:
        """Hover text: where an output piece was copied from, with the source snippet."""
        source = ranges.range_at(self.original, span[2], span[3])
        first, last = source.start.line + 1, source.end.line + 1
        lines = f"line {first}" if first == last else f"lines {first}–{last}"
        snippet = self.original[span[2]:span[3]]
        return f"copied from {lines} of the original\n\n```\n{snippet}\n```"


def lsp_range(text: str, start: int, end: int) -> dict:
    found = ranges.range_at(text, start, end)
    return {"start": {"line": found.start.line, "character": found.start.character},
            "end": {"line": found.end.line, "character": found.end.character}}
