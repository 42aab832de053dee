"""A rewrite follows the user's typing (`Rewrite.follow`, `session.follow_edits`): typing elsewhere moves
its lines, hunks and attribution, typing inside them stays in the side it was typed in (and decides
that hunk), and the editor is told when attribution or hunks no longer hold; in process, without a model."""

from __future__ import annotations

from types import SimpleNamespace

from lsprotocol import types

from assistant.engine.output import Span
from assistant.lsp import session
from assistant.lsp.hunks import Diff, Hunk
from assistant.lsp.rewrite import Rewrite

DOCUMENT = "def add(a, b):\n    return a + b\n\n\nprint(add(2, 3))\n"
TARGET = (0, DOCUMENT.index("\n\n\n") + 1)  # the function
OUTPUT = "def plus(a, b):\n    return a + b\n"


def written(accepted: bool = True) -> Rewrite:
    """A finished rewrite of the function whose body was copied from the original: accepted, or its
    diff waiting for a decision."""
    job = Rewrite("file:///a.py", DOCUMENT, *TARGET, id="1")
    body = OUTPUT.index("    return")
    diff, spans = job.diff_of(OUTPUT, [Span((body, len(OUTPUT)), (DOCUMENT.index("    return"), TARGET[1]))], True)
    diff = diff.decide(diff.undecided, True) if accepted else diff
    view = diff.view()
    job.wrote(diff, view, view.text + DOCUMENT[TARGET[1]:], spans)
    job.running = False
    return job


def test_typing_before_the_target_moves_it_and_its_attribution():
    job = written()
    now = "import sys\n" + job.known
    job.follow(now)
    assert not job.typed and now[job.start:job.end] == OUTPUT
    (a, b, c, d), = job.spans
    assert now[a:b] == DOCUMENT[c:d] == "    return a + b\n"


def test_typing_after_the_target_changes_nothing_of_it():
    job = written()
    before = (job.start, job.end, list(job.spans))
    job.follow(job.known.replace("print(add(2, 3))", "print(add(4, 5))"))
    assert not job.typed and (job.start, job.end, job.spans) == before


def test_typing_inside_the_target_is_kept_and_drops_the_attribution_it_touched():
    job = written()
    typed = job.known.replace("return a + b", "return a - b")
    job.follow(typed)
    assert job.typed and job.undecided == [] and job.spans == []
    assert job.view.text == typed[job.start:job.end] == OUTPUT.replace("a + b", "a - b")


def test_nothing_moves_while_an_edit_of_ours_is_in_flight():
    job = written()
    job.editing = True
    job.follow("something else entirely")
    assert not job.typed and job.known == OUTPUT + DOCUMENT[TARGET[1]:]


class Server:
    """What follow_edits reads of the language server: the rewrites, the open buffers, the notifications."""

    def __init__(self, job: Rewrite, text: str):
        self.rewrites = {job.uri: job}
        self.workspace = SimpleNamespace(text_documents={job.uri: SimpleNamespace(source=text, version=3)})
        self.sent: list[tuple[str, dict]] = []
        self.protocol = SimpleNamespace(notify=lambda method, params: self.sent.append((method, params)))
        self.client_capabilities = types.ClientCapabilities()

    def window_show_message(self, params: types.ShowMessageParams) -> None:
        self.sent.append(("window/showMessage", params.message))

    def text_document_publish_diagnostics(self, params: types.PublishDiagnosticsParams) -> None:
        self.sent.append(("textDocument/publishDiagnostics", params.diagnostics))

    def notices(self, method: str) -> list:
        return [params for sent, params in self.sent if sent == method]


def test_attribution_is_sent_again_only_when_a_span_no_longer_holds():
    job = written()
    ls = Server(job, "import sys\n" + job.known)
    session.follow_edits(ls, job.uri)
    assert ls.sent == [] and len(job.spans) == 1  # moved, and still holds: nothing to re-send
    ls.workspace.text_documents[job.uri].source = job.known.replace("a + b", "b + a")
    session.follow_edits(ls, job.uri)
    assert ls.sent == [(session.ATTRIBUTION, {"uri": job.uri, "version": 3, "spans": []})]


def test_a_running_rewrite_is_followed_by_its_own_writes_not_by_follow_edits():
    job = written()
    job.running = True
    ls = Server(job, "import sys\n" + job.known)
    session.follow_edits(ls, job.uri)
    assert job.known == OUTPUT + DOCUMENT[TARGET[1]:] and ls.sent == []


def test_typing_before_a_rewrite_under_review_moves_its_hunks():
    job = written(accepted=False)
    ls = Server(job, "import sys\n" + job.known)
    session.follow_edits(ls, job.uri)
    (notice,) = ls.notices(session.DIFF)
    (hunk,) = notice["hunks"]
    assert notice["lines"] == {"start": 1, "end": 4}
    assert (hunk["old"], hunk["new"]) == ({"start": 1, "end": 2}, {"start": 2, "end": 3})
    text = ls.workspace.text_documents[job.uri].source.splitlines()
    assert text[1:3] == ["def add(a, b):", "def plus(a, b):"]


def test_typing_in_a_hunks_new_line_decides_it_for_the_new_line_with_the_typing():
    job = written(accepted=False)
    typed = job.known.replace("def plus", "def plus_typed")
    job.follow(typed)
    assert job.known == typed and job.view.text == typed[job.start:job.end]  # both sides, until our edit
    assert job.owed == {0: True} and job.undecided == [] and not job.reviewing
    assert job.resolved().view().text == OUTPUT.replace("def plus", "def plus_typed")
    assert job.diff_notice(3)["hunks"] == []


def test_deleting_a_hunks_old_line_whole_accepts_it():
    job = written(accepted=False)
    job.follow(job.known.replace("def add(a, b):\n", "", 1))
    assert job.owed == {0: True} and job.resolved().view().text == OUTPUT


def test_typing_in_the_unchanged_lines_keeps_the_review_and_a_decision_keeps_the_typing():
    job = written(accepted=False)
    typed = job.known.replace("return a + b", "return a + b  # sum")
    job.follow(typed)
    assert job.owed == {} and job.undecided == [0] and job.view.text == typed[job.start:job.end]
    assert job.diff.decide([0], False).view().text == "def add(a, b):\n    return a + b  # sum\n"


def test_an_edit_that_joins_a_hunks_old_and_new_lines_keeps_them_as_typed():
    job = written(accepted=False)
    typed = job.known.replace("def add(a, b):\ndef plus", "def add(a, b): def plus", 1)
    job.follow(typed)
    assert job.undecided == [] and job.resolved().view().text == typed[job.start:job.end]


def test_deleting_one_of_two_equal_lines_deletes_the_hunks_side():
    """A diff of the texts cannot tell which of two blank lines went: the one a hunk removes is taken."""
    document = "x = 1\n\n\ny = 2\n"
    job = Rewrite("file:///b.py", document, 0, len(document), id="2")
    diff = Diff((("x = 1\n",), Hunk(0, ("\n",), ()), ("\n", "y = 2\n")))  # the first blank line goes
    job.wrote(diff, diff.view(), document, [])
    job.running = False
    job.follow("x = 1\n\ny = 2\n")
    assert job.owed == {0: True} and job.resolved().view().text == "x = 1\n\ny = 2\n"
