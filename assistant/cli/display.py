"""How `assistant rewrite` shows a rewrite as it streams: on a terminal, the text shaded by where each
character came from (copied dim, written bold) and a progress bar on stderr; after it, the closing
summary (share copied, speed, the speed-up over plain decoding, what the check found). Apart from
the command's running and writing, so that showing can change without touching what is written.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, TaskProgressColumn, TextColumn
from rich.progress import Progress as Bar
from rich.text import Text

COPIED, GENERATED = "dim", "bold cyan"  # copied text recedes, what the model wrote stands out


def styled(text: str, spans, start: int) -> Text:
    """A Delta's text (starting at output offset `start`) shaded by where each character came from."""
    shown, at = Text(text), 0
    for span in sorted(spans, key=lambda span: span.output):
        a, b = (max(0, offset - start) for offset in span.output)
        if a > at:
            shown.stylize(GENERATED, at, a)
        shown.stylize(COPIED, a, b)
        at = max(at, b)
    if at < len(text):
        shown.stylize(GENERATED, at, len(text))
    return shown


def kept(text: str) -> Text:
    """Text outside the lines being rewritten, shown as copied."""
    return Text(text, style=COPIED)


def summary(result, steps: list) -> str:
    """Closing line: share copied, speed, mean accepted and an estimated speedup over plain decoding.

    Plain decoding takes one step per token; a step here that drafted nothing is such a plain step,
    so its mean time prices the plain run: speedup ~ new_tokens * plain step time / time spent. `steps`
    are the streamed pass's; the figures before it cover every pass, repairs included."""
    stats = result.stats
    plain = [seconds for drafted, seconds in steps if drafted == 0]
    spent = sum(seconds for _, seconds in steps)
    streamed = stats.new_tokens - sum(repair.stats.new_tokens for repair in result.repairs)
    line = (f"{result.copied_share:.0%} of the text copied from the file, {stats.new_tokens} tokens in {stats.steps} steps, "
            f"{stats.tokens_per_second:.1f} tokens/s, {stats.mean_accepted:.2f} tokens/step")
    if plain and spent:
        speedup = streamed * (sum(plain) / len(plain)) / spent
        line += (f"; ~{speedup:.1f}x faster than plain decoding (one step per token, "
                 f"priced at the mean time of this run's undrafted steps)")
    elif stats.steps:
        line += f"; at most ~{stats.mean_accepted:.1f}x faster than plain decoding (tokens per step; no plain step seen)"
    return line + checked(result)


def checked(result) -> str:
    """What the check found and the repairs made, for the closing line."""
    check = result.check
    if check is None:
        return ""
    if not check.checked:
        return f"; unchecked ({'; '.join(check.notes).removeprefix('unchecked: ')})"
    passes = [repair for repair in result.repairs if repair.model]
    fixed = ", fixed without a model" if any(repair.kept and not repair.model for repair in result.repairs) else ""
    kept = sum(repair.kept for repair in passes)
    repaired = fixed + (f", {len(passes)} repair passes ({kept} kept)" if passes else "")
    left = len(check.problems)
    return f"; checked ({', '.join(check.ran)}){repaired}: {left or 'no'} problem{'' if left == 1 else 's'} left"


class Progress:
    """A rich progress bar over the characters of the text to rewrite, with tokens/s, shown only when
    stderr is a terminal. How far it is: the furthest place in the file that output came from."""

    def __init__(self, path: str, region: tuple[int, int], quiet: bool):
        self.bar, self.start = None, region[0]
        if quiet or not sys.stderr.isatty():
            return
        self.bar = Bar(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                       TextColumn("{task.fields[speed]}"), console=Console(stderr=True), transient=True)
        self.task = self.bar.add_task(path, total=region[1] - region[0], speed="")
        self.bar.start()

    def update(self, event, speed: str) -> None:
        if self.bar is not None:
            ends = [span.source[1] - self.start for span in event.tokens if span.source is not None]
            self.bar.update(self.task, speed=speed, **({"completed": max(ends)} if ends else {}))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def terminal_console(args):
    """A rich console for shaded streaming output when stdout is a terminal and plain text is asked for."""
    if args.json or args.diff or args.in_place or args.output or not sys.stdout.isatty():
        return None
    return Console(highlight=False, soft_wrap=True)
