"""Edit prompts: the model's chat template around instruction and document, with every
prompt token knowing which characters of the document it came from.

Those per-token document spans are what attribution reports when a drafted token is
copied from the prompt, so they come from the fast tokenizer's offsets over the fully
rendered prompt, never from tokenizing pieces separately (which would change tokens at
the seams).
"""

from __future__ import annotations

from dataclasses import dataclass

SYSTEM = ("You are a careful editor. Rewrite the text exactly as the instruction asks and reply with "
          "the complete rewritten text only: no explanations, no code fences.")
CONTEXT_CHARS = 3000  # read-only context kept on each side of a selection


@dataclass(frozen=True)
class Segment:
    text: str
    source: int | None = None  # document offset of text[0], None for text that is not the document's


@dataclass
class Prompt:
    ids: list[int]
    sources: list[tuple[int, int] | None]  # document character span of each token, if it is the document's


class PromptError(ValueError):
    pass


def edit_segments(instruction: str, document: str, selection: tuple[int, int] | None = None,
                  references: tuple[str, ...] = ()) -> list[Segment]:
    """The user message as segments: instruction, read-only material, then the text to rewrite last,
    so that the answer starts right where the copy source ends."""
    segments = [Segment(instruction.strip() + "\n\n")]
    for reference in references:
        segments += [Segment("Related file, for reference only:\n"), Segment(reference.rstrip() + "\n\n")]
    if selection is None:
        return segments + [Segment(document, 0)]
    start, end = selection
    before_start, after_end = max(0, start - CONTEXT_CHARS), min(len(document), end + CONTEXT_CHARS)
    if before_start < start:
        segments += [Segment("Text before the part to rewrite, for context only:\n"),
                     Segment(document[before_start:start], before_start), Segment("\n\n")]
    if end < after_end:
        segments += [Segment("Text after the part to rewrite, for context only:\n"),
                     Segment(document[end:after_end], end), Segment("\n\n")]
    return segments + [Segment("Rewrite only this part and reply with its new version alone:\n"),
                       Segment(document[start:end], start)]


def build_prompt(tokenizer, segments: list[Segment], system: str | None = SYSTEM,
                 history: tuple[dict, ...] = ()) -> Prompt:
    """Render the chat: `system` (None keeps the template's own), earlier `history` messages, then
    one user message made of `segments`."""
    content, placed = "", []  # placed: (start in content, segment)
    for segment in segments:
        placed.append((len(content), segment))
        content += segment.text
    messages = ([{"role": "system", "content": system}] if system else []) + list(history)
    messages.append({"role": "user", "content": content})
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    base = rendered.rfind(content)
    if base < 0:
        raise PromptError("the model's chat template altered the document; cannot map tokens to it")
    encoded = tokenizer(rendered, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoded["input_ids"]
    pieces = tokenizer.batch_decode([[i] for i in ids])
    sources: list[tuple[int, int] | None] = []
    for piece, (s, e) in zip(pieces, encoded["offset_mapping"]):
        sources.append(None)
        for at, segment in placed:
            lo = base + at
            if segment.source is not None and lo <= s < e <= lo + len(segment.text):
                # Byte-level tokens that split a character decode to U+FFFD; they get no span.
                if piece == rendered[s:e]:
                    sources[-1] = (segment.source + s - lo, segment.source + e - lo)
                break
    return Prompt(ids, sources)


def strip_fence(text: str) -> tuple[int, int]:
    """The (start, end) of `text` inside a wrapping ``` fence the model added, or the whole text."""
    if not text.startswith("```"):
        return 0, len(text)
    first_newline = text.find("\n")
    if first_newline < 0:
        return len(text), len(text)  # only an opening fence so far
    end = len(text)
    closing = text.rstrip().rfind("\n```")
    if closing >= first_newline and text[closing:].strip() == "```":
        end = closing + 1  # keep the newline that ended the last line
    return first_newline + 1, max(first_newline + 1, end)
