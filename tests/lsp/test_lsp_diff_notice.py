"""What the editor is told of a rewrite under review (`Rewrite.diff_notice`, `code_lenses`, `diagnostics`):
the hunks' old and new lines and generated text, the lenses that decide them, and the answer's
problems on their hunk until it is decided; in process, without a model."""

from __future__ import annotations

from assistant.checks import Problem
from assistant.engine.output import Span
from assistant.lsp.rewrite import Rewrite

DOCUMENT = "import os\n\ndef area(w, h):\n    return w * h\n\nprint(area(3, 4))\n"
TARGET = (DOCUMENT.index("def"), DOCUMENT.index("\nprint"))  # the function
OUTPUT = "def rectangle_area(w, h):\n    return w * h\n"
PROBLEM = Problem("renamed, but still called", OUTPUT.index("rectangle_area"), OUTPUT.index("("), "F821", "ruff")


def reviewed(problems: tuple[Problem, ...] = ()) -> Rewrite:
    """A finished rewrite of the function whose body was copied, its diff in the buffer."""
    job = Rewrite("file:///a.py", DOCUMENT, *TARGET, id="7")
    body = (OUTPUT.index("(w, h)"), len(OUTPUT))
    copied = [Span(body, (DOCUMENT.index("(w, h)"), DOCUMENT.index("(w, h)") + body[1] - body[0]))]
    diff, spans = job.diff_of(OUTPUT, copied, final=True)
    view = diff.view()
    job.answer_problems = job.problems_of(OUTPUT, problems)
    job.wrote(diff, view, DOCUMENT[:job.start] + view.text + DOCUMENT[job.end:], spans)
    job.running = False
    return job


def test_the_notice_names_old_and_new_lines_and_the_generated_text():
    job = reviewed()
    notice = job.diff_notice(4)
    assert (notice["uri"], notice["version"], notice["id"], notice["streaming"]) == ("file:///a.py", 4, "7", False)
    assert notice["lines"] == {"start": 2, "end": 5}  # the old line, the new one, the unchanged body
    (hunk,) = notice["hunks"]
    assert (hunk["old"], hunk["new"]) == ({"start": 2, "end": 3}, {"start": 3, "end": 4})
    lines = job.known.splitlines()
    assert lines[2:4] == ["def area(w, h):", "def rectangle_area(w, h):"]
    (generated,) = hunk["generated"]
    assert generated == {"start": {"line": 3, "character": 0}, "end": {"line": 3, "character": 18}}


def test_code_lenses_decide_each_hunk_and_all_of_them():
    job = reviewed()
    found = [(lens.range.start.line, lens.command.title, lens.command.command, lens.command.arguments)
             for lens in job.code_lenses()]
    assert found == [(2, "Accept all", "assistant.acceptAll", ["file:///a.py", "7"]),
                     (2, "Reject all", "assistant.rejectAll", ["file:///a.py", "7"]),
                     (2, "Accept", "assistant.acceptHunk", ["file:///a.py", "7", 0]),
                     (2, "Reject", "assistant.rejectHunk", ["file:///a.py", "7", 0])]
    job.running = True
    assert [lens.command.title for lens in job.code_lenses()] == ["Cancel"]


def test_problems_show_on_their_hunk_until_it_is_decided():
    job = reviewed((PROBLEM,))
    (diagnostic,) = job.diagnostics()
    assert (diagnostic.source, diagnostic.code, diagnostic.message) == ("assistant", "F821", PROBLEM.message)
    assert (diagnostic.range.start.line, diagnostic.range.start.character) == (3, 4)
    assert diagnostic.range.end.character == 4 + len("rectangle_area")
    job.diff = job.diff.decide([0], True)
    job.view = job.diff.view()
    assert job.diagnostics() == []
    assert job.diff_notice(5)["hunks"] == [] and job.code_lenses() == []


def test_a_hunk_typed_in_shows_nothing_more():
    job = reviewed((PROBLEM,))
    job.follow(job.known.replace("rectangle_area", "rect"))
    assert job.diff_notice(5)["hunks"] == [] and job.code_lenses() == [] and job.diagnostics() == []
