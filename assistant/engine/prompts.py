"""Edit prompts: the model's chat template around instruction and document, with every
prompt token knowing which characters of the document it came from.

Those per-token document spans are what attribution reports when a drafted token is
copied from the prompt, so they come from the fast tokenizer's offsets over the fully
rendered prompt, never from tokenizing pieces separately (which would change tokens at
the seams).

The text to rewrite is shown in a code fence and the answer is started with the same fence,
so the model's reply is the rewritten text itself and ends where it closes the fence. Small
models asked for "the rewritten text only" otherwise often answer with a comment about the
text; measured on the calibration split of the code edits, SmolLM2-135M copied its input
(difflib ratio above 0.5) in 6 of 12 answers this way against 2 of 12 with a bare document
after the instruction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SYSTEM = ("You are a careful editor. Rewrite the text exactly as the instruction asks and reply with the complete "
          "rewritten text only, in one code block: no explanations.")
CONTEXT_CHARS = 3000  # read-only context kept on each side of a selection


@dataclass(frozen=True)
class Segment:
    text: str
    source: int | None = None  # document offset of text[0], None for text that is not the document's


@dataclass
class Prompt:
    ids: list[int]
    sources: list[tuple[int, int] | None]  # document character span of each token, if it is the document's
    fence: str | None = None  # the answer is the body of a code block opened with this fence


class PromptError(ValueError):
    pass


def fence_for(*texts: str) -> str:
    """A code fence longer than any run of backticks in `texts` (CommonMark's rule), at least ```."""
    longest = max((len(run) for text in texts for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def fenced(text: str, source: int | None, fence: str) -> list[Segment]:
    return [Segment(fence + "\n"), Segment(text, source), Segment(("" if text.endswith("\n") else "\n") + fence)]


def edit_segments(instruction: str, document: str, selection: tuple[int, int] | None = None,
                  references: tuple[str, ...] = ()) -> tuple[list[Segment], str]:
    """The user message as segments, and the fence its answer opens: read-only material first, then the
    text to rewrite, then the instruction, so that the fenced answer follows the instruction directly."""
    start, end = selection or (0, len(document))
    before_start, after_end = max(0, start - CONTEXT_CHARS), min(len(document), end + CONTEXT_CHARS)
    fence = fence_for(document[before_start:after_end], *references)
    segments = referenced(references, fence)
    if selection is None:
        return segments + [*fenced(document, 0, fence), Segment("\n\n" + instruction.strip())], fence
    if before_start < start:
        segments += [Segment("Text before the part to rewrite, for context only:\n"),
                     *fenced(document[before_start:start], before_start, fence), Segment("\n\n")]
    if end < after_end:
        segments += [Segment("Text after the part to rewrite, for context only:\n"),
                     *fenced(document[end:after_end], end, fence), Segment("\n\n")]
    return segments + [Segment("The part to rewrite:\n"), *fenced(document[start:end], start, fence),
                       Segment("\n\n" + instruction.strip() + "\nReply with the new version of that part alone.")], fence


def referenced(references: tuple[str, ...], fence: str) -> list[Segment]:
    """The related files, each fenced and said to be for reference only."""
    segments = []
    for reference in references:
        segments += [Segment("Related file, for reference only:\n"), *fenced(reference, None, fence), Segment("\n\n")]
    return segments


def definition_segments(instruction: str, document: str, part: tuple[int, int],
                        references: tuple[str, ...] = ()) -> tuple[list[Segment], str]:
    """The user message of one pass of an edit made definition by definition (engine/definitions.py), and the
    fence its answer opens: the references and the whole document first, exactly as a whole-document edit
    shows them, so that every pass over the same document shares that prompt prefix (prefilled once, then
    reused from the prefix cache, or warmed while the buffer was idle); then the part, then the instruction."""
    fence = fence_for(document, *references)
    start, end = part
    return [*referenced(references, fence), *fenced(document, 0, fence),
            Segment("\n\nThat is the whole file, for context only. The part of it to rewrite:\n"),
            *fenced(document[start:end], start, fence),
            Segment("\n\n" + instruction.strip() + "\nReply with the new version of that part alone.")], fence


def edit_prompt(tokenizer, instruction: str, document: str, selection: tuple[int, int] | None = None,
                references: tuple[str, ...] = ()) -> Prompt:
    """The prompt that asks for `document` (or its `selection`) rewritten as `instruction` says."""
    segments, fence = edit_segments(instruction, document, selection, references)
    return build_prompt(tokenizer, segments, fence=fence)


def definition_prompt(tokenizer, instruction: str, document: str, part: tuple[int, int],
                      references: tuple[str, ...] = ()) -> Prompt:
    """The prompt that asks for the definition at `part` of `document` rewritten as `instruction` says."""
    segments, fence = definition_segments(instruction, document, part, references)
    return build_prompt(tokenizer, segments, fence=fence)


def build_prompt(tokenizer, segments: list[Segment], system: str | None = SYSTEM,
                 history: tuple[dict, ...] = (), fence: str | None = None) -> Prompt:
    """Render the chat: `system` (None keeps the template's own), earlier `history` messages, then
    one user message made of `segments`; with `fence`, the answer is begun as a code block."""
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
    rendered += f"{fence}\n" if fence else ""
    return encoded_prompt(tokenizer, rendered, [(base + at, segment) for at, segment in placed], fence)


def text_prompt(tokenizer, text: str) -> Prompt:
    """A plain completion's prompt: `text` as it is, without a chat template; attribution points into it."""
    return encoded_prompt(tokenizer, text, [(0, Segment(text, 0))], None)


def encoded_prompt(tokenizer, rendered: str, placed: list[tuple[int, Segment]], fence: str | None) -> Prompt:
    """`rendered` tokenized, each token given the source span of the segment placed around it (at its start)."""
    encoded = tokenizer(rendered, add_special_tokens=False, return_offsets_mapping=True)
    ids = encoded["input_ids"]
    pieces = tokenizer.batch_decode([[i] for i in ids])
    sources: list[tuple[int, int] | None] = []
    for piece, (s, e) in zip(pieces, encoded["offset_mapping"]):
        sources.append(None)
        for lo, segment in placed:
            if segment.source is not None and lo <= s < e <= lo + len(segment.text):
                # Byte-level tokens that split a character decode to U+FFFD; they get no span.
                if piece == rendered[s:e]:
                    sources[-1] = (segment.source + s - lo, segment.source + e - lo)
                break
    return Prompt(ids, sources, fence)


def repair_instruction(instruction: str, problems: list[tuple[int, str]], original_shown: bool) -> str:
    """The instruction of a repair pass: the original one, then the problems its answer introduced as
    (1-based line in that answer, message), and, when the text before the edit is shown as the related
    file (to restore changed code from), that it is."""
    listed = "\n".join(f"line {line}: {message}" for line, message in problems)
    original = "The related file is the text before the edit.\n" if original_shown else ""
    return (f"{instruction.strip()}\n\nThe edit introduced these problems:\n{listed}\n{original}"
            "Fix them and change nothing else.")
