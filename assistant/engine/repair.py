"""Checking a finished answer, and repairing the problems it introduced with further passes.

When an answer finishes (it ended by itself: not at the token limit, not cancelled), it is checked
once against the request's document (`assistant.checks.check_edit`: the document before, and the
document with the answer in place of the selection or of the whole, after), and the problems are
given in offsets of the answer (those outside the rewritten range at its nearer edge).

When repairs are allowed, some problems are first repaired without a model (FIXERS). Where an edit that
should only annotate or document broke the syntax, the fewest changed lines that make it whole again are
put back as the document had them (`checks.unbroken_edit`); then the default values of parameters it changed
(`checks.default_edit`, the hints beside them kept), then the changed code of each definition and the
definitions removed or added (`checks.restorable_edit`). A Python answer that gave back only the
definitions it added or changed, its names left undefined, is put into the file (`checks.fragment_edit`).
Then a type-hint edit's missing `typing` imports are written and forward references quoted
(`checks.hint_fix_edit`). Asked to repair such answers, a 1.5B model gives them back unchanged.
While problems remain, a repair pass rewrites the answer itself (so drafts copy from it) on the
original instruction followed by the problems, line by line (by default not for an edit that should only
annotate or document, where such passes were measured to give the problems back: `model_passes`); when some problem is code the edit
changed, the text before the edit is shown beside it, read-only, to restore from. Each repaired
answer is checked against the original document again and kept only if it finished with fewer
problems than the answer it repaired; otherwise it is dropped and repairing stops there (a pass
that made no progress is not worth another: under greedy decoding the same prompt would give the
same answer again). A pass that has given the answer back unchanged past the line of its last problem
is given up there (`answered`): it would keep those problems, and finishing it would cost a whole answer.

Invariants: every pass is an ordinary generation, so its output is token-identical to `ar`'s on its
prompt, and what a fix puts back is the document's own text, attributed to it; the Result is that
of the answer kept, with its problems named, the attribution of a kept repair traced back through
the answers before it to the original document, and the stats of every pass; a checker that fails,
or a repair that cannot run, is a note in the check and never stops the answer's delivery. The
repair passes' own events are not streamed: a Repairing event announces each.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Protocol

from assistant import checks
from assistant.checks import Check, Fix, Problem
from assistant.engine.contract import Request, RewriteError, check_request
from assistant.engine.events import NOTHING, Delta, Event, Repair, Repairing, Result, Stats
from assistant.engine.long_documents import combined
from assistant.engine.output import Span, merge_spans
from assistant.engine.prompts import repair_instruction

CHANGED_CODE, SYNTAX, UNDEFINED_NAME = "changed-code", "syntax", "F821"
Finder = Callable[..., list[Fix]]
# how to repair each kind of problem without a model, in order
FIXERS: tuple[tuple[str, Finder], ...] = ((SYNTAX, checks.unbroken_edit), (CHANGED_CODE, checks.default_edit),
                                          (CHANGED_CODE, checks.restorable_edit),
                                          (UNDEFINED_NAME, checks.fragment_edit),
                                          (UNDEFINED_NAME, checks.hint_fix_edit))


@dataclass(frozen=True)
class Edit:
    """What a pass is asked: a document, the range of it to rewrite (None: all), the instruction, the
    language to check it as (an LSP languageId; None: unchecked), and read-only references."""

    document: str
    instruction: str
    selection: tuple[int, int] | None = None
    language: str | None = None
    references: tuple[str, ...] = ()

    @property
    def region(self) -> tuple[int, int]:
        return self.selection or (0, len(self.document))

    def with_answer(self, answer: str) -> str:
        """The document with `answer` in place of the rewritten range."""
        start, end = self.region
        return self.document[:start] + answer + self.document[end:]

    def check(self, answer: str) -> Check:
        """The problems putting `answer` in place introduced, in offsets of `answer`; a failure is a note."""
        start = self.region[0]
        try:
            check = checks.check_edit(self.document, self.with_answer(answer), language=self.language,
                                      instruction=self.instruction)
        except Exception as error:  # noqa: BLE001 - a check must never stop an answer's delivery
            return Check(notes=(f"the check failed: {type(error).__name__}: {error}",))

        def inside(offset: int) -> int:
            return min(max(offset - start, 0), len(answer))
        return replace(check, problems=tuple(replace(p, start=inside(p.start), end=inside(p.end))
                                             for p in check.problems))

    def change(self, answer: str) -> str:
        """What putting `answer` in place changed (`checks.change_kind`), in the edit's language."""
        return checks.change_kind(self.document, self.with_answer(answer), self.language)

    def fixes(self, answer: str, finder: Finder) -> list[Fix]:
        """The Fixes of `answer` that `finder` (one of FIXERS) gives that lie within the rewritten range (and
        restore from it), in offsets of `answer`; none when that cannot be said."""
        start, end = self.region
        try:
            found = finder(self.document, self.with_answer(answer), language=self.language,
                           instruction=self.instruction)
        except Exception:  # noqa: BLE001 - as a check, a restore must never stop an answer's delivery
            return []
        inside = [fix._replace(start=fix.start - start, end=fix.end - start) for fix in found]
        return [fix for fix in inside if 0 <= fix.start and fix.end <= len(answer)
                and (fix.source is None or start <= fix.source[0] and fix.source[1] <= end)]

    def repair(self, answer: str, problems: tuple[Problem, ...]) -> Edit:
        """The pass that repairs `answer`: it rewrites the answer in place, on the instruction and its problems."""
        start, _ = self.region
        listed = [(answer.count("\n", 0, problem.start) + 1, problem.message) for problem in problems]
        show_original = any(problem.code == CHANGED_CODE for problem in problems)
        references = self.references + ((self.document[slice(*self.region)],) if show_original else ())
        selection = (start, start + len(answer)) if self.selection is not None else None
        return Edit(self.with_answer(answer), repair_instruction(self.instruction, listed, show_original), selection,
                    self.language, references)

    def traced(self, spans: list[Span], answer: str, answer_spans: list[Span]) -> list[Span]:
        """`spans` of a repair of `answer` (sources in `self.repair(answer, ...).document`) with sources in
        this edit's document, through `answer_spans` (merged; the answer's own attribution); a token whose
        source does not lie in one piece of this document is left unattributed."""
        start, end = self.region
        shift = len(answer) - (end - start)
        starts = [span.output[0] for span in answer_spans]

        def source(a: int, b: int) -> tuple[int, int] | None:
            if b <= start:
                return a, b
            if a >= start + len(answer):
                return a - shift, b - shift
            if a < start or b > start + len(answer):
                return None
            at = bisect_right(starts, a - start) - 1
            if at < 0 or answer_spans[at].output[1] < b - start:
                return None
            (out, _), (src, _) = answer_spans[at].output, answer_spans[at].source
            return src + a - start - out, src + b - start - out

        return [Span(span.output, source(*span.source) if span.source else None) for span in spans]


class Answers(Protocol):
    """An engine as repair sees it: the answer to a checked request, unchecked."""

    def answer(self, request: Request, cancel: threading.Event | None = None) -> Iterator[Event]:
        """The request's events, ending with its Result."""


def checked(engine: Answers, request: Request, attempts: int, cancel: threading.Event | None) -> Iterator[Event]:
    """The events of the engine's answer to `request`, then its Result checked and, while problems remain,
    repaired (`attempts` 0: not at all) without a model, then with up to `model_passes` further answers of the
    engine. The answer is asked for now, so a request the engine refuses raises RewriteError here, before
    anything runs."""
    return _checked(engine, request, engine.answer(request, cancel), attempts, cancel)


def model_passes(request: Request, attempts: int) -> int:
    """The model repair passes an answer may get: `attempts`, but none unless the request asks for them where
    the edit should only annotate or document. There the fixes without a model repair what they can, and the
    1.5B's passes gave the problems back: asked of standard-library modules, 2 passes in 15 were kept (one
    of them for an undefined `io`), each costing 35 to 270 s (docs/speed.md, "Model repair
    passes")."""
    return 0 if request.repairs is None and checks.preserving(request.instruction) else attempts


def _checked(engine: Answers, request: Request, first: Iterator[Event], attempts: int,
             cancel: threading.Event | None) -> Iterator[Event]:
    edit = Edit(request.document, request.instruction, request.selection, request.language, request.references)
    result = None
    with closing(first):
        for event in first:
            if isinstance(event, Result):
                result = event
            else:
                yield event
    if result is None:
        raise AssertionError("the engine ended without a result")
    if not result.finished:
        yield result
        return
    started = time.perf_counter()
    check = edit.check(result.text)
    check_seconds, repairs, passes = time.perf_counter() - started, [], [result.stats]
    restoring = restored(edit, result, check) if attempts else None
    if restoring is not None:
        repairs.append(restoring[0])
        if restoring[0].kept:
            result, check = restoring[1], restoring[2]
    allowed = model_passes(request, attempts)
    while check.problems and len(passes) - 1 < allowed and not (cancel is not None and cancel.is_set()):
        yield Repairing(check.problems, len(repairs) + 1)
        repair, answer, answer_check = attempt(engine, request, edit, result, check, len(repairs) + 1, cancel)
        if repair is None:
            check = replace(check, notes=check.notes + answer_check.notes)
            break
        repairs.append(repair)
        passes.append(repair.stats)
        if not repair.kept:
            break
        result, check = answer, answer_check
    yield replace(result, stats=combined(passes), check=check, repairs=tuple(repairs), check_seconds=check_seconds,
                  change=edit.change(result.text))


def attempt(engine: Answers, request: Request, edit: Edit, result: Result, check: Check, number: int,
            cancel: threading.Event | None) -> tuple[Repair | None, Result, Check]:
    """One repair pass of `result`, the answer to `request` (as `edit`): the Repair, the answer as `edit`'s
    (attribution traced to its document) and its check; (None, result, a check whose notes say why) when the
    pass could not run."""
    started = time.perf_counter()
    asked = edit.repair(result.text, check.problems)
    try:
        repairing = check_request(replace(request, document=asked.document, instruction=asked.instruction,
                                          selection=asked.selection, references=asked.references))
        with closing(engine.answer(repairing, cancel)) as events:
            answer = answered(events, result.text, check.problems)
    except RewriteError as error:  # the answer cannot be a request's document (empty, too long)
        return None, result, Check(notes=(f"no repair: {error}",))
    if isinstance(answer, Stats):  # given up: it gave the problems back
        return Repair(number, check.problems, check.problems, False, answer, time.perf_counter() - started), \
            result, check
    tokens = edit.traced(answer.token_spans, result.text, result.spans)
    answer = replace(answer, spans=merge_spans(tokens), token_spans=tokens, pieces=result.pieces,
                     definitions=result.definitions)
    answer_check = edit.check(answer.text) if answer.finished else Check()
    kept = answer.finished and len(answer_check.problems) < len(check.problems)
    repair = Repair(number, check.problems, answer_check.problems, kept, answer.stats, time.perf_counter() - started)
    return repair, answer, answer_check


def answered(events: Iterator[Event], before: str, problems: tuple[Problem, ...]) -> Result | Stats:
    """A repair pass's Result; or, as soon as its text has given `before` back unchanged past the end of the line
    of the last problem, its figures so far: a greedy pass that copied every problem line keeps those problems,
    so it is given up there, and a failed pass costs the copy up to its last problem, not a whole answer."""
    limit = line_end(before, max(problem.end for problem in problems))
    shown, totals = "", NOTHING
    for event in events:
        if isinstance(event, Result):
            return event
        if isinstance(event, Delta):
            shown, totals = shown + event.text, event.totals
            if len(shown) > limit and shown[:limit + 1] == before[:limit + 1]:
                return totals
    raise AssertionError("the engine ended without a result")


def line_end(text: str, at: int) -> int:
    """The offset of the line break that ends the line holding `at` (the text's length on its last line)."""
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def restored(edit: Edit, result: Result, check: Check) -> tuple[Repair, Result, Check] | None:
    """`result` with the Fixes of FIXERS made for each kind of problem it has (no model pass): the Repair
    (kept when the answer has fewer problems), the answer and its check; None if none could be made."""
    started = time.perf_counter()
    answer, answer_check = result, check
    for code, finder in FIXERS:
        fixes = edit.fixes(answer.text, finder) if any(p.code == code for p in answer_check.problems) else []
        if fixes:
            tokens = respliced(answer.token_spans, fixes)
            answer = replace(answer, text=checks.applied(answer.text, fixes), spans=merge_spans(tokens),
                             token_spans=tokens)
            answer_check = edit.check(answer.text)
    if answer is result:
        return None
    kept = len(answer_check.problems) < len(check.problems)
    repair = Repair(1, check.problems, answer_check.problems, kept, NOTHING, time.perf_counter() - started,
                    model=False)
    return repair, answer, answer_check


def respliced(spans: list[Span], fixes: list[Fix]) -> list[Span]:
    """`spans` (in output order) of a text with `fixes` (in order) made: a span across a fixed range goes,
    one after it shifts, and each fix's text is one span, attributed to its source."""
    result, shift, at = [], 0, 0

    def fix_next() -> None:
        nonlocal shift, at
        fix = fixes[at]
        if fix.text:
            result.append(Span((fix.start + shift, fix.start + shift + len(fix.text)), fix.source))
        shift, at = shift + len(fix.text) - (fix.end - fix.start), at + 1

    for span in spans:
        while at < len(fixes) and fixes[at].end <= span.output[0]:
            fix_next()
        if at < len(fixes) and fixes[at].start < span.output[1]:
            continue
        result.append(Span((span.output[0] + shift, span.output[1] + shift), span.source))
    while at < len(fixes):
        fix_next()
    return result
