"""How good the attribution of an output is, judged against a character diff with its document.

The diff (diff_match_patch, raw character level, no semantic cleanup) says which output
characters were kept from the document and where each came from. Against it:

- coverage: of the kept output characters, the share that carry attribution at all;
- precision: of all attributed output characters (kept or not), the share whose source
  position is the document position the diff aligns them with. Counting every attributed
  character, not only kept ones, charges attribution that points at text the diff calls new.

Counts are returned rather than ratios so that a benchmark can pool them over many records.
"""

from __future__ import annotations

from dataclasses import dataclass

from diff_match_patch import diff_match_patch

DIFF_TIMEOUT_S = 2.0  # an unrelated output (a chat answer) makes the exact diff quadratic; cap it


@dataclass(frozen=True)
class Quality:
    kept: int  # output characters the diff marks as kept from the document
    kept_attributed: int  # ... of which carry attribution
    attributed: int  # output characters that carry attribution
    correct: int  # ... whose source is the aligned document position

    def __add__(self, other: Quality) -> Quality:
        return Quality(self.kept + other.kept, self.kept_attributed + other.kept_attributed,
                       self.attributed + other.attributed, self.correct + other.correct)

    @property
    def coverage(self) -> float | None:
        return self.kept_attributed / self.kept if self.kept else None

    @property
    def precision(self) -> float | None:
        return self.correct / self.attributed if self.attributed else None


def alignment(document: str, output: str) -> list[int | None]:
    """The document position of every output character the diff keeps, None for inserted ones."""
    dmp = diff_match_patch()
    dmp.Diff_Timeout = DIFF_TIMEOUT_S
    aligned: list[int | None] = []
    at = 0  # position in the document
    for op, text in dmp.diff_main(document, output, False):
        if op == dmp.DIFF_EQUAL:
            aligned += range(at, at + len(text))
        if op == dmp.DIFF_INSERT:
            aligned += [None] * len(text)
        if op != dmp.DIFF_INSERT:
            at += len(text)
    return aligned


def attributed_sources(output: str, spans) -> list[int | None]:
    """The claimed document position of every output character, from per-token spans."""
    sources: list[int | None] = [None] * len(output)
    for span in spans:
        if span.source is None:
            continue
        (start, end), source = span.output, span.source[0]
        for i in range(start, min(end, len(output))):
            sources[i] = source + i - start
    return sources


def quality(document: str, output: str, spans) -> Quality:
    """Score the attribution `spans` (objects with .output and .source ranges) of `output`."""
    aligned, claimed = alignment(document, output), attributed_sources(output, spans)
    kept = [i for i, a in enumerate(aligned) if a is not None]
    attributed = [i for i, c in enumerate(claimed) if c is not None]
    return Quality(kept=len(kept), kept_attributed=sum(claimed[i] is not None for i in kept),
                   attributed=len(attributed), correct=sum(claimed[i] == aligned[i] for i in attributed))
