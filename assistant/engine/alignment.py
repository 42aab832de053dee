"""Which characters of an output were copied from a text, by character alignment: attribution for an
answer whose generator says nothing of where its tokens came from (a remote server other than
`assistant serve`), and the reference the benchmark judges the engine's own attribution against.

The alignment is difflib's matching blocks, character level, no junk heuristic: an order-preserving
set of longest common runs. `copied_spans` keeps the runs long enough to be a copy rather than a
coincidence, as Spans in the engine's format.
"""

from __future__ import annotations

import difflib

from assistant.engine.output import Span

MIN_COPIED = 4  # characters: a shorter common run ("a", "e ", "()") is as likely written as copied


def matching_blocks(document: str, output: str) -> list[difflib.Match]:
    return difflib.SequenceMatcher(None, document, output, autojunk=False).get_matching_blocks()


def alignment(document: str, output: str) -> list[int | None]:
    """The document position of every output character the alignment keeps, None for inserted ones."""
    aligned: list[int | None] = [None] * len(output)
    for block in matching_blocks(document, output):
        aligned[block.b:block.b + block.size] = range(block.a, block.a + block.size)
    return aligned


def copied_spans(document: str, output: str, offset: int = 0, min_copied: int = MIN_COPIED) -> list[Span]:
    """The runs of `output` copied from `document` (at least `min_copied` characters), their sources shifted
    by `offset` (where `document` starts in the text the spans name)."""
    return [Span((block.b, block.b + block.size), (offset + block.a, offset + block.a + block.size))
            for block in matching_blocks(document, output) if block.size >= min_copied]
