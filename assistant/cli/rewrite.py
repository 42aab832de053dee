"""`assistant rewrite PATH... -i INSTRUCTION`: rewrite files on an instruction.

Everything that can be checked without the model (paths, options, encodings, line ranges) is
checked first, so mistakes fail fast; the model is then loaded (or the --engine reached) once and
the files are rewritten in turn, one failure, a remote engine's included, not stopping the others.
The engine plans long files (it splits them into pieces); an answer that did not finish (token
limit, cancel, failure) is never written, and the command exits non-zero naming the option that
would let it finish. The engine checks every finished answer in the file's language and repairs
the problems it introduced; an answer that still has problems is not written (`--in-place`, `-o`)
unless `--allow-problems` says so, and its problems are listed on stderr (path:line:column:
message) whatever the output. An answer that made no edit (the text as it was, or only its layout
or comments changed: `Result.change`) is said to have made no change, never reported as a plain
success; the text as it was is not written over the file. Files are written by
`files.write_atomically` (whole or not at all, owner and mode kept, hard links kept, the PATH~
backup), after checking that the file did not change on disk meanwhile. Ctrl-C or SIGTERM while an
answer streams stops it at its next step (a second one at once); nothing is written, and the exit
status is 130. A byte-order mark belongs to the file's encoding, not its text: the model never sees
it, and the file written keeps it.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import os
import re
import sys
import threading
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from assistant import (
    Delta,
    ModelError,
    Repairing,
    Result,
    RewriteError,
    Span,
    check_instruction,
    files,
    problem_json,
)
from assistant.checks import Problem, language_of
from assistant.cli.display import Progress, kept, styled, summary, terminal_console
from assistant.cli.options import (
    USAGE,
    add_engine_option,
    add_model_options,
    assistant_for,
    cancelling_on_signals,
    interrupt_on_sigterm,
)

FAILED = 1
BOM = "\ufeff"


class Refused(Exception):
    """A file or option this command will not work with; the message says why."""


def register(commands) -> None:
    parser = commands.add_parser("rewrite", help="rewrite files on an instruction",
                                 description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files to rewrite; - reads stdin, writes stdout")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("-i", "--instruction")
    source.add_argument("--instruction-file", type=Path, metavar="F")
    parser.add_argument("--lines", metavar="A:B", help="rewrite only lines A to B (1-based, inclusive)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, help="most tokens to generate (per piece of a long file)")
    parser.add_argument("--max-piece-tokens", type=int, help=argparse.SUPPRESS)  # forces splitting, for tests
    parser.add_argument("--encoding", help="read and write the files in this encoding (default: UTF-8, strict)")
    parser.add_argument("--language", metavar="ID",
                        help="check the answer as this language (an LSP languageId such as python; default: from "
                             "the file name, or a shebang; stdin without one is unchecked)")
    parser.add_argument("--repairs", type=int, metavar="N",
                        help="repair passes at most when the answer introduced problems (default 2; 0: none)")
    output = parser.add_argument_group("output")
    output.add_argument("--diff", action="store_true", help="print a unified diff instead of the new text")
    output.add_argument("--json", action="store_true", help="print one JSON object per file: text, spans, stats")
    output.add_argument("--in-place", action="store_true", help="replace the file (keeping a backup PATH~)")
    output.add_argument("--no-backup", action="store_true", help="with --in-place, keep no backup")
    output.add_argument("-o", "--output", type=Path, metavar="OUT", help="write the new text to OUT")
    output.add_argument("--allow-problems", action="store_true",
                        help="with --in-place or -o, write an answer even if it introduced problems")
    output.add_argument("--quiet", action="store_true", help="no progress and no summary on stderr")
    add_model_options(parser)
    add_engine_option(parser)
    parser.set_defaults(run=run)


# --- reading and checking, before any model is loaded ---

@dataclass
class Source:
    """A file as read: its text normalised to \\n for the model, and what is needed to write it back."""

    path: str  # as given; "-" is stdin
    text: str
    crlf: bool  # every line ended in \r\n: restored on output
    bom: bool  # the file began with a byte-order mark the encoding left in the text: kept out of it, written back
    final_newline: bool
    fingerprint: tuple | None  # (mtime_ns, size, sha256) to notice a change on disk before replacing
    selection: tuple[int, int] | None


def fingerprint(path: str) -> tuple:
    data = Path(path).read_bytes()
    stat = os.stat(path)
    return stat.st_mtime_ns, stat.st_size, hashlib.sha256(data).hexdigest()


def read_source(path: str, encoding: str | None, lines: str | None) -> Source:
    if path == "-":
        data, mark = sys.stdin.buffer.read(), None
    else:
        if Path(path).is_dir():
            raise Refused(f"{path}: is a directory")
        try:
            mark = fingerprint(path)
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise Refused(f"{path}: no such file") from None
        except OSError as error:
            raise Refused(f"{path}: cannot read it ({error.strerror})") from None
    try:
        raw = data.decode(encoding or "utf-8")
    except UnicodeDecodeError as error:
        raise Refused(f"{path}: is not valid {encoding or 'UTF-8'} (byte {error.start}); "
                      "give its encoding with --encoding") from None
    except LookupError:
        raise Refused(f"unknown encoding {encoding!r}") from None
    bom = raw.startswith(BOM)  # UTF-8's, or UTF-16-LE's named as such: the codec keeps it as a character
    raw = raw.removeprefix(BOM)
    if "\x00" in raw:  # decoded first: UTF-16 text is full of NUL bytes
        raise Refused(f"{path}: looks binary (it contains NUL characters); not rewriting it")
    if not raw.strip():
        raise Refused(f"{path}: is empty; there is nothing to rewrite")
    crlf = "\r\n" in raw and raw.count("\r\n") == raw.count("\n")  # no line break at all: LF, the default
    text = raw.replace("\r\n", "\n") if crlf else raw
    return Source(path, text, crlf, bom, text.endswith("\n"), mark, line_range(text, lines, path))


def line_range(text: str, lines: str | None, path: str) -> tuple[int, int] | None:
    """The character range of --lines A:B (1-based, inclusive) in `text`."""
    if lines is None:
        return None
    first, last = (int(n) for n in lines.split(":"))
    starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n" and i + 1 < len(text)]
    if not 1 <= first <= last <= len(starts):
        raise Refused(f"{path}: --lines {lines} is outside the file, which has {len(starts)} lines")
    end = starts[last] if last < len(starts) else len(text)
    if not text[starts[first - 1]:end].strip():
        raise Refused(f"{path}: lines {lines} are blank; there is nothing to rewrite")
    return starts[first - 1], end


def check_options(args) -> str:
    """The instruction, or Refused for a usage mistake."""
    if args.diff and args.json:
        raise Refused("--diff and --json cannot be combined")
    if args.in_place and args.output:
        raise Refused("--in-place and -o cannot be combined")
    if args.output and len(args.paths) > 1:
        raise Refused("-o takes a single input PATH")
    if args.in_place and "-" in args.paths:
        raise Refused("--in-place cannot replace stdin (-)")
    if args.paths.count("-") > 1:
        raise Refused("stdin (-) can be read only once")
    if args.no_backup and not args.in_place:
        raise Refused("--no-backup goes with --in-place")
    if args.allow_problems and not (args.in_place or args.output):
        raise Refused("--allow-problems goes with --in-place or -o")
    if args.repairs is not None and args.repairs < 0:
        raise Refused("--repairs must be 0 or more")
    if args.lines is not None and not re.fullmatch(r"\s*[0-9]+\s*:\s*[0-9]+\s*", args.lines):
        raise Refused(f"--lines wants A:B with line numbers in digits 0-9, not {args.lines!r}")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise Refused(f"--temperature must be a number >= 0, not {args.temperature}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise Refused("--max-new-tokens must be at least 1")
    if args.max_piece_tokens is not None and args.max_piece_tokens < 1:
        raise Refused("--max-piece-tokens must be at least 1")
    instruction = args.instruction
    if args.instruction_file is not None:
        try:
            instruction = args.instruction_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise Refused(f"cannot read the instruction file {args.instruction_file}: {error}") from None
    try:
        return check_instruction(instruction)
    except RewriteError as error:
        raise Refused(str(error)) from None


def check_target(path: Path, flag: str) -> None:
    """Refuse, before the model loads, a place the new text could not safely replace."""
    real = Path(os.path.realpath(path))
    if real.exists() and not real.is_file():
        raise Refused(f"{flag} {path}: is not a regular file (a directory, FIFO or device); not writing there")
    if not real.parent.is_dir():
        raise Refused(f"{flag} {path}: the folder {real.parent} does not exist")
    if not os.access(real.parent, os.W_OK | os.X_OK):
        raise Refused(f"{flag} {path}: the folder {real.parent} is not writable")


# --- turning the result back into file text ---

def spliced(source: Source, result) -> tuple[str, list]:
    """The whole new text: the result in place of the selection, the rest kept (attributed to itself)."""
    start, end = source.selection or (0, len(source.text))
    before, after = source.text[:start], source.text[end:]
    spans = [Span((0, start), (0, start))] if before else []
    spans += [Span((a + start, b + start), s) for (a, b), s in ((sp.output, sp.source) for sp in result.spans)]
    if after:
        at = start + len(result.text)
        spans.append(Span((at, at + len(after)), (end, len(source.text))))
    return before + result.text + after, spans


def restored(source: Source, text: str, spans: list) -> tuple[str, list]:
    """The new file text with the original's line endings and final newline, and the spans with
    output offsets in that text and source offsets in the file as read."""
    if source.final_newline and not text.endswith("\n"):
        text += "\n"
    elif not source.final_newline:
        text = text.rstrip("\n")
    spans = [Span((a, min(b, len(text))), s) for (a, b), s in ((sp.output, sp.source) for sp in spans)
             if a < len(text)]
    if source.crlf:
        to_output = crlf_offsets(text)
        to_input = crlf_offsets(source.text)
        spans = [Span((to_output(a), to_output(b)), (to_input(c), to_input(d)))
                 for (a, b), (c, d) in ((sp.output, sp.source) for sp in spans)]
        text = text.replace("\n", "\r\n")
    return text, spans


def in_file(problem: Problem, to_output, length: int) -> Problem:
    """A problem with offsets in the file text as written (`to_output`: from \\n offsets), within it."""
    return Problem(problem.message, min(to_output(problem.start), length), min(to_output(problem.end), length),
                   problem.code, problem.checker)


def crlf_offsets(text: str):
    """Map an offset in `text` to the offset it has once every \\n becomes \\r\\n."""
    newlines = [i for i, c in enumerate(text) if c == "\n"]
    return lambda offset: offset + bisect_left(newlines, offset)


def original_text(source: Source) -> str:
    return source.text.replace("\n", "\r\n") if source.crlf else source.text


# --- writing ---

def write_answer(target: Path, data: bytes, source: Source, backup: bool) -> list[str]:
    """Replace `target` by `data` as `files.write_atomically` does (whole or not at all, owner and mode kept,
    hard links kept), unless it is the file read and it changed on disk since. Returns what of the owner and
    mode could not be kept; Refused when nothing could be written."""
    if source.fingerprint is not None and os.path.realpath(target) == os.path.realpath(source.path):
        try:
            unchanged = fingerprint(source.path) == source.fingerprint
        except OSError:
            unchanged = False
        if not unchanged:
            raise Refused(f"{source.path}: changed on disk while it was being rewritten; not overwriting it")
    try:
        return files.write_atomically(target, data, backup)
    except files.BackupError as error:
        raise Refused(f"{error}{' (--no-backup goes without one)' if backup else ''}") from None
    except files.WriteError as error:
        raise Refused(str(error)) from None


# --- problems ---

def located(source: Source, result) -> list[tuple[Problem, int, int]]:
    """The answer's problems with offsets in the new file text (as `spliced` makes it, \\n line breaks),
    and the 1-based line and column where each starts."""
    start = (source.selection or (0, 0))[0]
    text = spliced(source, result)[0]
    found = []
    for problem in result.problems:
        at = start + problem.start
        line_start = text.rfind("\n", 0, at) + 1
        found.append((Problem(problem.message, at, start + problem.end, problem.code, problem.checker),
                      text.count("\n", 0, at) + 1, at - line_start + 1))
    return found


def report_problems(source: Source, problems: list[tuple[Problem, int, int]]) -> None:
    name = "stdin" if source.path == "-" else source.path
    for problem, line, column in problems:
        print(f"{name}:{line}:{column}: {problem.message} [{problem.code}]", file=sys.stderr)


# --- running ---

UNFINISHED = {
    "length": "the answer reached the token limit before it was complete; allow more with --max-new-tokens N "
              "(it applies to each piece of a long file)",
    "cancelled": "the rewrite was cancelled",
}


def streamed(events, source: Source, args, console, progress) -> tuple[Result | None, list[tuple[int, float]]]:
    """Read the answer's events to their end, streaming its text to `console` (None: not shown): its Result
    (None where it stopped without one) and every step's (tokens drafted, seconds)."""
    steps, shown, result = [], 0, None  # shown: characters of the answer streamed
    try:
        for event in events:
            if isinstance(event, Delta):
                if event.new_tokens:
                    steps.append((event.drafted, event.seconds))
                progress.update(event, f"{event.totals.tokens_per_second:.1f} tokens/s")
                if console is not None:
                    console.print(styled(event.text, event.tokens, shown), end="")
                shown += len(event.text)
            elif isinstance(event, Repairing) and not args.quiet:
                print(f"{source.path}: the answer introduced {len(event.problems)} problems; repairing them "
                      f"(pass {event.attempt})", file=sys.stderr)
            elif isinstance(event, Result):
                result = event
    finally:
        events.close()
        progress.close()
    return result, steps


def rewrite_one(assistant, source: Source, instruction: str, args, console) -> None:
    stream_to_terminal = console is not None
    language = language_of(args.language or (None if source.path == "-" else source.path), source.text)
    cancel = threading.Event()
    events = assistant.rewrite(source.text, instruction, selection=source.selection, cancel=cancel,
                               max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                               max_piece_tokens=args.max_piece_tokens, language=language, repairs=args.repairs)
    region = source.selection or (0, len(source.text))
    progress = Progress(source.path, region, args.quiet or stream_to_terminal)  # after a refusal could come
    if stream_to_terminal:
        console.print(kept(source.text[:region[0]]), end="")
    with cancelling_on_signals(cancel):
        result, steps = streamed(events, source, args, console, progress)
    if cancel.is_set():  # the answer stopped at its next step: nothing is written
        raise KeyboardInterrupt
    if stream_to_terminal:
        console.print(kept(source.text[region[1]:]), end="")
        if any(repair.kept for repair in result.repairs):  # what streamed was the answer before its repair
            console.rule("repaired")
            console.print(spliced(source, result)[0], end="")
    try:
        finish(source, result, args, stream_to_terminal)
    finally:  # also when the answer is refused: what it cost, what was repaired and what is left
        if not args.quiet:
            print(f"{source.path}: {summary(result, steps)}", file=sys.stderr)


def finish(source: Source, result, args, streamed: bool) -> None:
    """Print or write the new text the way the options ask; an unfinished answer is never written, nor
    one with problems unless --allow-problems says so, and one that made no edit is said to (on stderr,
    even with --quiet: it is the outcome, not progress)."""
    text, spans = restored(source, *spliced(source, result))
    problems = located(source, result)
    if args.json:  # the record says how it stopped, what the check found and whether it changed anything
        print(json.dumps(record(source, result, text, spans, problems)), flush=True)
    if not result.finished:
        raise Refused(f"{source.path}: {UNFINISHED[result.stopped]}; nothing written")
    report_problems(source, problems)
    if result.definitions is not None and result.definitions.failed:  # an edit made definition by definition
        print(f"{source.path}: left as they were (their pass was cut or gave no whole definition): "
              f"{', '.join(result.definitions.failed)}", file=sys.stderr)
    if problems and (args.in_place or args.output) and not args.allow_problems:
        raise Refused(f"{source.path}: the answer introduced {len(problems)} problem{'s' * (len(problems) > 1)} "
                      f"(listed above); nothing written (--allow-problems writes it anyway)")
    if args.diff:
        old, new = original_text(source), text
        name = "stdin" if source.path == "-" else source.path
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                   f"a/{name}", f"b/{name}"))
        sys.stdout.flush()
    elif not (args.in_place or args.output or args.json):
        # Streamed text went out as it came; plain text goes out whole, as it will be written.
        sys.stdout.write(("" if text.endswith("\n") else "\n") if streamed else text)
        sys.stdout.flush()
    if args.in_place or args.output:
        write_out(source, text, result, args)
    elif result.unchanged:
        print(f"{source.path}: {result.change_note}", file=sys.stderr)


def record(source: Source, result, text: str, spans: list, problems: list[tuple[Problem, int, int]]) -> dict:
    """The --json record of a file: the Result's, with offsets in the file text as written and read."""
    to_input = crlf_offsets(source.text) if source.crlf else (lambda offset: offset)
    to_output = crlf_offsets(spliced(source, result)[0]) if source.crlf else (lambda offset: offset)
    return result.to_json() | {"path": source.path, "text": text, "spans": [s.to_json() for s in spans],
                               "pieces": [[to_input(a), to_input(b)] for a, b in result.pieces],
                               "problems": [problem_json(in_file(p, to_output, len(text)), text)
                                            for p, _, _ in problems]}


def write_out(source: Source, text: str, result, args) -> None:
    """Write the new text over the file (--in-place) or to OUT (-o), and say so. An answer that is the text as
    it was is not written over it (nothing to write: no backup either); one that changed only its layout or
    comments is written, since it is what the model answered, and said to have made no edit."""
    target = Path(source.path) if args.in_place else args.output
    said = f"{source.path}: {result.change_note}; " if result.unchanged else f"{source.path}: "
    if args.in_place and result.change == "none":
        print(f"{said}nothing written", file=sys.stderr)
        return
    lost = write_answer(target, (BOM * source.bom + text).encode(args.encoding or "utf-8"), source,
                        backup=args.in_place and not args.no_backup)
    if lost:
        print(f"assistant rewrite: {target}: could not keep {' and '.join(lost)}", file=sys.stderr)
    if result.unchanged or not args.quiet:
        print(f"{said}written to {target}", file=sys.stderr)


def run(args) -> int:
    interrupt_on_sigterm()
    try:
        instruction = check_options(args)
        if args.output:
            check_target(args.output, "-o")
    except Refused as error:
        return complain(error, USAGE)
    sources, failed = [], False
    for path in args.paths:
        try:
            source = read_source(path, args.encoding, args.lines)
            if args.in_place:
                check_target(Path(path), "--in-place")
            sources.append(source)
        except Refused as error:
            failed = complain(error, FAILED)
    if not sources:
        return FAILED
    assistant = None
    try:
        assistant = assistant_for(args)
        console = terminal_console(args)
        for source in sources:
            try:
                rewrite_one(assistant, source, instruction, args, console)
            except (Refused, RewriteError, ModelError, OSError, UnicodeEncodeError) as error:  # RemoteError too
                failed = complain(f"{source.path}: {error}" if isinstance(error, RewriteError | ModelError) else error,
                                  FAILED)
    except (RewriteError, ModelError, OSError) as error:  # loading the model, or reaching the engine
        return complain(error, FAILED)
    except KeyboardInterrupt:
        return complain("interrupted; the file being rewritten was left as it was", 130)
    finally:
        if assistant is not None:
            assistant.close()
    return FAILED if failed else 0


def complain(error, code: int) -> int:
    print(f"assistant rewrite: {error}", file=sys.stderr)
    return code
