"""How good the attribution of an output is, judged against a character alignment with its document.

The alignment (`engine.alignment`: difflib's matching blocks, character level, no junk heuristic) says
which output characters were kept from the document and where each came from. Against it:

- coverage: of the kept output characters, the share that carry attribution at all;
- precision: of all attributed output characters (kept or not), the share whose source
  position is the document position the alignment gives them. Counting every attributed
  character, not only kept ones, charges attribution that points at text the alignment calls new.

diff-match-patch was tried first: its Myers diff is exact but, in Python, did not finish a
6-9k-character code file against a shorter rewrite within seconds, and on its timeout it
returns "delete everything, insert everything", which scored every code edit as 0 kept.

Counts are returned rather than ratios so that a benchmark can pool them over many records.
"""

from __future__ import annotations

from dataclasses import dataclass

from assistant.engine.alignment import alignment


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
