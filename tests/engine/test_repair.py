"""The check and repair of a finished answer (engine/repair.py), with scripted passes in place of the
model: which answer is kept, what each pass is asked, what streams, and where problems and attribution
point. The real model's passes are in test_engine.py."""

from __future__ import annotations

import threading

import pytest

from assistant import checks
from assistant.checks import Check, Problem
from assistant.engine.contract import Request, RewriteError
from assistant.engine.events import Delta, Queued, Repairing, Result, Stats
from assistant.engine.output import Span
from assistant.engine.repair import Edit, checked

from checks.helpers import annotate, colorsys_source, replace_once

DOCUMENT = "def area(w, h):\n    return w * h\n"
INSTRUCTION = "Add type hints to every function."
HINTED = "def area(w: int, h: int) -> int:\n    return w * h\n"
UNDEFINED = "def area(w: Num, h: Num) -> Num:\n    return w * h\n"  # three uses of a name never defined
ONE_LEFT = "Num = int\ndef area(w: Num, h: Num) -> Numb:\n    return w * h\n"
TWO_LEFT = "Num = int\ndef area(w: Num, h: Numb) -> Numb:\n    return w * h\n"
WORSE = "def area(w: Num, h: Num) -> Nums:\n    return w * h + Unknown\n"  # four names undefined


def stats(tokens: int) -> Stats:
    return Stats(tokens, tokens, 1.0, 10, 0, 0, 0.1)


def answer(text: str, stopped: str = "eos", spans: list[Span] | None = None) -> Result:
    spans = spans or []
    return Result(text, spans, stats(len(text)), stopped, "fake", "float32", spans)


class Passes:
    """A scripted engine: its first answer is the one a test gives, then each repair pass answers with the next
    result; the requests of the repair passes are kept."""

    def __init__(self, *results: Result):
        self.results, self.asked, self.first = list(results), [], None

    def answer(self, request: Request, cancel=None):
        if self.first is not None:
            first, self.first = self.first, None
            return events(Queued(0), Delta(first.text, [], 3, 0, 0, 0.1), first)
        self.asked.append(request)
        result = self.results.pop(0)
        return events(Delta(result.text, [], 3, 0, 0, 0.1), result)


def events(*items):
    """A generator, as the engine's event streams are (they are closed when left early)."""
    yield from items


def request(edit: Edit, repairs: int | None = None) -> Request:
    return Request(edit.document, edit.instruction, edit.selection, edit.references, language=edit.language,
                   repairs=repairs)


def checked_events(edit: Edit, first_answer: Result, passes: Passes, attempts: int = 2, cancel=None) -> list:
    """The events of `checked` on a request that asks for `attempts` repairs (model passes included)."""
    passes.first = first_answer
    return list(checked(passes, request(edit, attempts), attempts, cancel))


def run(edit: Edit, first_answer: Result, passes: Passes, attempts: int = 2):
    events = checked_events(edit, first_answer, passes, attempts)
    return events, events[-1]


PYTHON = Edit(DOCUMENT, INSTRUCTION, language="python")
TIDY = Edit(DOCUMENT, "Tidy this up.", language="python")  # asks for code changes: ruff alone checks them
DOCUMENTED = Edit(DOCUMENT, "Add a docstring to every function.", language="python")  # no fix defines `Num` here


def test_a_clean_answer_is_checked_once_and_not_repaired():
    events, result = run(PYTHON, answer(HINTED), Passes())
    assert [type(e) for e in events] == [Queued, Delta, Result]
    assert result.text == HINTED and result.check.ran == ("ruff", "structure") and result.problems == ()
    assert result.repairs == () and result.check_seconds > 0


def test_problems_are_repaired_on_the_answer_and_the_problems_named():
    passes = Passes(answer(HINTED))
    events, result = run(TIDY, answer(UNDEFINED), passes)
    [repairing] = [e for e in events if isinstance(e, Repairing)]
    assert repairing.attempt == 1 and [p.code for p in repairing.problems] == ["F821"] * 3
    [asked] = passes.asked
    assert asked.document == UNDEFINED and asked.selection is None and asked.language == "python"
    assert asked.instruction == (f"{TIDY.instruction}\n\nThe edit introduced these problems:\n"
                                 "line 1: Undefined name `Num`\nline 1: Undefined name `Num`\n"
                                 "line 1: Undefined name `Num`\nFix them and change nothing else.")
    assert asked.references == ()  # no changed code: the text before the edit is not needed
    assert result.text == HINTED and result.problems == ()
    [repair] = result.repairs
    assert (repair.attempt, repair.kept, len(repair.problems_before), repair.problems_after) == (1, True, 3, ())
    assert result.stats.new_tokens == len(UNDEFINED) + len(HINTED)  # every pass's cost
    assert [e.text for e in events if isinstance(e, Delta)] == [UNDEFINED]  # the repair's steps are not streamed
    assert result.to_json()["repairs"][0]["kept"] is True


def test_a_repair_with_more_problems_is_dropped():
    _, result = run(TIDY, answer(UNDEFINED), Passes(answer(WORSE), answer(HINTED)))
    assert result.text == UNDEFINED and len(result.problems) == 3
    [repair] = result.repairs  # and no second pass: greedy, the same prompt would answer the same
    assert not repair.kept and len(repair.problems_after) == 4


def test_at_most_the_passes_allowed():
    events, result = run(TIDY, answer(UNDEFINED), Passes(answer(TWO_LEFT), answer(ONE_LEFT), answer(HINTED)),
                         attempts=2)
    assert [e.attempt for e in events if isinstance(e, Repairing)] == [1, 2]
    assert [r.kept for r in result.repairs] == [True, True] and result.text == ONE_LEFT
    assert len(result.problems) == 1


def test_fewer_problems_are_kept_and_repaired_again():
    _, result = run(TIDY, answer(UNDEFINED), Passes(answer(ONE_LEFT), answer(HINTED)))
    assert [(len(r.problems_before), len(r.problems_after), r.kept) for r in result.repairs] == [(3, 1, True),
                                                                                              (1, 0, True)]
    assert result.text == HINTED


@pytest.mark.parametrize("repaired", [UNDEFINED, UNDEFINED.replace("w * h", "h * w")])
def test_a_repair_without_fewer_problems_is_dropped_and_ends_repairing(repaired):
    _, result = run(TIDY, answer(UNDEFINED), Passes(answer(repaired), answer(HINTED)))
    [repair] = result.repairs  # no progress: not worth another pass
    assert not repair.kept and len(repair.problems_after) == 3 and result.text == UNDEFINED


def test_no_repair_when_turned_off():
    events, result = run(PYTHON, answer(UNDEFINED), Passes(), attempts=0)
    assert not any(isinstance(e, Repairing) for e in events)
    assert len(result.problems) == 3 and result.repairs == ()


@pytest.mark.parametrize("stopped", ["length", "cancelled"])
def test_an_unfinished_answer_is_not_checked(stopped):
    _, result = run(PYTHON, answer(UNDEFINED, stopped), Passes())
    assert result.check is None and result.repairs == ()
    assert result.to_json()["checks"]["notes"] == ["unchecked: the answer did not finish"]


def test_an_unfinished_repair_is_dropped():
    _, result = run(TIDY, answer(UNDEFINED), Passes(answer(HINTED[:10], "length")))
    [repair] = result.repairs
    assert not repair.kept and result.text == UNDEFINED and len(result.problems) == 3


def test_a_pass_that_copies_its_problem_lines_is_given_up_there():
    """Under greedy decoding a pass that gave back every line with a problem keeps those problems: it is
    stopped there, so a failed pass costs its copy up to the last problem, not a whole answer."""
    tail = "".join(f"\n\ndef f{i}(x):\n    return x\n" for i in range(50))
    copied = UNDEFINED + tail
    closed = []

    class Copies(Passes):
        def answer(self, request, cancel=None):
            if self.first is not None:
                return super().answer(request, cancel)
            self.asked.append(request)

            def stream():
                try:
                    for line in copied.splitlines(keepends=True):
                        yield Delta(line, [], 1, 0, 0, 0.1, stats(len(line)))
                    yield answer(copied)
                finally:
                    closed.append(True)
            return stream()

    passes = Copies()
    result = checked_events(TIDY, answer(copied), passes)[-1]
    [repair] = result.repairs
    assert len(passes.asked) == 1 and closed == [True] and not repair.kept
    assert repair.problems_after == repair.problems_before and result.text == copied
    assert repair.stats.new_tokens < len(UNDEFINED) + 5  # the Deltas up to the problem line's end, no more


def test_a_cancel_stops_repairing():
    cancel = threading.Event()
    cancel.set()
    events = checked_events(TIDY, answer(UNDEFINED), Passes(answer(HINTED)), 2, cancel)
    assert events[-1].text == UNDEFINED and events[-1].repairs == () and len(events[-1].problems) == 3


def test_a_failing_check_is_a_note_and_the_answer_is_delivered(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr(checks, "check_edit", broken)
    _, result = run(PYTHON, answer(UNDEFINED), Passes())
    assert result.text == UNDEFINED and result.problems == ()
    assert result.check.notes == ("the check failed: RuntimeError: boom",) and not result.check.checked


def test_a_repair_that_cannot_run_is_a_note():
    class Refuses(Passes):
        def answer(self, request: Request, cancel=None):
            if self.first is None:
                raise RewriteError("the prompt is too long")
            return super().answer(request, cancel)
    events = checked_events(TIDY, answer(UNDEFINED), Refuses())
    result = events[-1]
    assert result.text == UNDEFINED and len(result.problems) == 3 and result.repairs == ()
    assert result.check.notes == ("no repair: the prompt is too long",)


def test_unchecked_languages_say_so():
    _, result = run(Edit("Some prose.\n", "Fix the spelling."), answer("Some prose\n"), Passes())
    assert result.check.notes == ("unchecked: prose or an unknown language",) and not result.check.checked


def test_changed_code_shows_the_text_before_the_edit():
    document = "SCALE = 2\n" + DOCUMENT  # a module-level statement: no definition to restore it from
    passes = Passes(answer("SCALE = 2\n" + HINTED))
    _, result = run(Edit(document, INSTRUCTION, language="python"), answer("SCALE = 3\n" + HINTED), passes)
    assert passes.asked[0].references == (document,)
    assert "The related file is the text before the edit." in passes.asked[0].instruction
    assert result.text == "SCALE = 2\n" + HINTED


TWO = DOCUMENT + "\n\ndef half(x):\n    return x / 2\n"


def test_a_definition_whose_code_changed_is_restored_without_a_model_pass():
    """The changed statement goes back to the document's line, the hints stay; attribution shifts past the
    restored line and names the document as its source."""
    changed = "def area(w: int, h: int) -> int:\n    return w + h\n"
    tail = "\n\ndef half(x: float) -> float:\n    return x / 2\n"
    copied = Span((len(changed) + 2, len(changed) + 11), (len(DOCUMENT) + 2, len(DOCUMENT) + 11))  # "def half("
    passes = Passes()
    _, result = run(Edit(TWO, INSTRUCTION, language="python"), answer(changed + tail, spans=[copied]), passes)
    assert passes.asked == [] and result.problems == ()
    assert result.text == HINTED + tail
    (repair,) = result.repairs
    assert repair.kept and repair.stats.new_tokens == 0 and repair.problems_before[0].code == "changed-code"
    line = HINTED.index("    return")
    assert result.spans == [Span((line, len(HINTED)), (DOCUMENT.index("    return"), len(DOCUMENT))),
                            Span((len(HINTED) + 2, len(HINTED) + 11), (len(DOCUMENT) + 2, len(DOCUMENT) + 11))]
    assert all(result.text[slice(*span.output)] == TWO[slice(*span.source)] for span in result.spans)


def test_a_changed_signature_restores_the_whole_definition():
    renamed = "def area(w: int, height: int) -> int:\n    return w * height\n"
    _, result = run(PYTHON, answer(renamed), Passes())
    assert result.text == DOCUMENT and result.problems == () and result.spans == [Span((0, len(DOCUMENT)),
                                                                                        (0, len(DOCUMENT)))]


def test_a_default_the_edit_added_goes_and_the_hints_stay():
    defaulted = "def area(w: int = 0, h: int = 1) -> int:\n    return w * h\n"
    _, result = run(PYTHON, answer(defaulted), Passes())
    assert result.text == HINTED and result.problems == ()
    [repair] = result.repairs
    assert repair.kept and not repair.model


def test_a_syntax_error_then_changed_code_are_put_back_in_one_model_free_repair():
    """The line that broke the syntax goes back first; then the statement whose code changed; the hints
    the edit added stay."""
    broken = "def area(w: int, h: int) -> int:\n    return w + h\n"  # changed code
    tail = "\n\ndef half(x: float) -> float:\n    return (x / 2\n"  # a bracket never closed
    passes = Passes()
    _, result = run(Edit(TWO, INSTRUCTION, language="python"), answer(broken + tail), passes)
    assert passes.asked == [] and result.problems == ()
    assert result.text == HINTED + "\n\ndef half(x: float) -> float:\n    return x / 2\n"
    (repair,) = result.repairs
    assert repair.kept and repair.stats.new_tokens == 0 and [p.code for p in repair.problems_before] == ["syntax"]
    assert all(result.text[slice(*span.output)] == TWO[slice(*span.source)] for span in result.spans)


def test_a_forgotten_typing_import_is_written_without_a_model_pass():
    hinted = "def area(w: Optional[int], h: int) -> int:\n    return w * h\n"
    copied = Span((hinted.index("    return"), len(hinted)), (DOCUMENT.index("    return"), len(DOCUMENT)))
    passes = Passes()
    _, result = run(PYTHON, answer(hinted, spans=[copied]), passes)
    line = "from typing import Optional\n"
    assert passes.asked == [] and result.problems == () and result.text == line + hinted
    (repair,) = result.repairs
    assert repair.kept and [p.code for p in repair.problems_before] == ["F821"]
    assert result.spans == [Span((len(line) + copied.output[0], len(line) + len(hinted)), copied.source)]


def test_an_answer_with_only_its_new_definition_is_put_into_the_file_without_a_model_pass():
    edit = Edit(DOCUMENT, "Add a function volume that uses area.", language="python")
    fragment = "def volume(w, h, d):\n    return area(w, h) * d\n"
    passes = Passes()
    _, result = run(edit, answer(fragment, spans=[Span((0, 4), None)]), passes)
    assert passes.asked == [] and result.problems == () and result.text == DOCUMENT + "\n\n" + fragment
    (repair,) = result.repairs
    assert repair.kept and not repair.model and [p.code for p in repair.problems_before] == ["F821"]
    assert result.spans[0] == Span((0, len(DOCUMENT)), (0, len(DOCUMENT)))  # the file put back, attributed to it


def test_a_fix_reaching_outside_the_selection_is_left_to_the_model_and_the_others_made():
    """The class, which holds a method, would be put back whole from its first line, outside the selection;
    the function inside is still put back without a model."""
    head = "class Box:\n"
    body = "    size = 1\n\n    def grow(self):\n        return 2\n\n\n" + DOCUMENT
    changed = body.replace("size = 1", "size = 3").replace("w * h", "w + h")
    document = head + body
    passes = Passes(answer(body))
    edit = Edit(document, "Add docstrings.", (len(head), len(document)), "python")
    _, result = run(edit, answer(changed), passes)
    [asked] = passes.asked
    assert asked.document == head + changed.replace("w + h", "w * h")  # the function was put back first
    assert result.text == body and result.problems == ()


def test_the_colorsys_edit_of_the_issue_is_repaired_without_a_model_pass():
    """CPython's colorsys with type hints and no `typing` import, a line deleted from `rgb_to_hls` and a
    constant changed in `hls_to_rgb`: every problem is fixed, the hints stay, and no model pass runs."""
    before = colorsys_source()
    hinted = annotate(before)
    broken = replace_once(replace_once(hinted, "    sumc = (maxc+minc)\n", ""), "h-ONE_THIRD))", "h-ONE_SIXTH))")
    passes = Passes()
    _, result = run(Edit(before, INSTRUCTION, language="python"), answer(broken), passes)
    assert passes.asked == [] and result.problems == () and result.repairs[0].kept
    assert result.text == replace_once(hinted, "\n__all__", "\nfrom typing import Tuple\n__all__")


def test_no_restore_when_repair_is_off():
    changed = "def area(w: int, h: int) -> int:\n    return w + h\n"
    _, result = run(PYTHON, answer(changed), Passes(), attempts=0)
    assert result.text == changed and result.repairs == () and result.problems


def test_selection_problems_point_into_the_answer_and_the_repair_rewrites_it_in_place():
    document = "import os\n\n" + DOCUMENT + "\nprint(os.sep)\n"
    start = document.index("def")
    edit = Edit(document, TIDY.instruction, (start, start + len(DOCUMENT)), "python")
    passes = Passes(answer(HINTED))
    _, result = run(edit, answer(UNDEFINED), passes)
    [repair] = result.repairs
    assert [(p.start, p.end) for p in repair.problems_before] == [(12, 15), (20, 23), (28, 31)]
    assert {UNDEFINED[p.start:p.end] for p in repair.problems_before} == {"Num"}
    asked = passes.asked[0]
    assert asked.document == document[:start] + UNDEFINED + document[start + len(DOCUMENT):]
    assert asked.selection == (start, start + len(UNDEFINED))
    assert result.text == HINTED


def test_problems_outside_the_selection_are_put_at_its_edges():
    document = "x = 1\n" + DOCUMENT + "y = area(1, 2)\n"
    start = len("x = 1\n")
    edit = Edit(document, "Rename area to surface.", (start, start + len(DOCUMENT)), "python")
    renamed = DOCUMENT.replace("area", "surface")
    _, result = run(edit, answer(renamed), Passes(), attempts=0)
    [problem] = result.problems  # `area` is now undefined in the line after the selection
    assert problem.code == "F821" and (problem.start, problem.end) == (len(renamed), len(renamed))


def test_a_kept_repairs_attribution_is_traced_to_the_original_document():
    before, after = "def noop():\n    pass\n", "area(1, 2)\n"
    document, start = before + DOCUMENT + after, len(before)
    end = start + len(DOCUMENT)
    edit = Edit(document, TIDY.instruction, (start, end), "python")
    # The first answer copied its last line from the document; the repair copies from that answer and
    # from the text around it (the repair's document: `before`, the answer, `after`).
    line, copied, hinted = DOCUMENT.index("    return"), UNDEFINED.index("    return"), HINTED.index("    return")
    first_answer = answer(UNDEFINED, spans=[Span((copied, len(UNDEFINED)), (start + line, end))])
    tail = start + len(UNDEFINED)  # where `after` starts in the repair's document
    repaired = answer(HINTED, spans=[Span((hinted, hinted + 4), (start + copied, start + copied + 4)),
                                     Span((0, 3), (0, 3)),  # "def" of `before`
                                     Span((4, 8), (tail, tail + 4)),  # "area" of `after`
                                     Span((9, 10), (start + 9, start + 10))])  # a part the first answer wrote
    _, result = run(edit, first_answer, Passes(repaired))
    assert result.text == HINTED
    assert [s.source for s in result.token_spans] == [(start + line, start + line + 4), (0, 3), (end, end + 4), None]
    for span in result.spans:
        assert result.text[slice(*span.output)] == document[slice(*span.source)]


def test_problems_in_json_have_their_line_and_character():
    _, result = run(TIDY, answer("x = 1\n" + UNDEFINED), Passes(), attempts=0)
    problem = result.to_json()["problems"][0]
    assert problem["line"] == 1 and problem["character"] == 12 and problem["checker"] == "ruff"
    assert set(problem) == {"message", "start", "end", "code", "checker", "line", "character"}
    assert result.to_json()["checks"]["ran"] == ["ruff"]


def test_check_edit_results_are_mapped_not_altered():
    check = Edit(DOCUMENT, INSTRUCTION, language="python").check(UNDEFINED)
    assert isinstance(check, Check) and all(isinstance(p, Problem) for p in check.problems)
    assert check == checks.check_edit(DOCUMENT, UNDEFINED, language="python", instruction=INSTRUCTION)


def test_an_edit_that_should_only_annotate_gets_no_model_pass_unless_asked():
    """By default (the request says no number), the problems an annotating or documenting edit keeps after the
    fixes without a model are named, not given to the model; a request that asks for repairs gets the passes."""
    passes = Passes(answer(HINTED))
    passes.first = answer(UNDEFINED)
    result = list(checked(passes, request(DOCUMENTED), 2, None))[-1]
    assert result.repairs == () and result.problems and passes.asked == []
    passes = Passes(answer(HINTED))
    passes.first = answer(UNDEFINED)
    assert list(checked(passes, request(DOCUMENTED, 2), 2, None))[-1].repairs
