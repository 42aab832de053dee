"""Edits made definition by definition (engine/definitions.py): which instructions qualify, the plan (the
definitions found, those done skipped, what falls back to one pass), and the stitching (gaps kept, a failed
pass's definition left as it was, one stream). No model: passes are scripted."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from assistant.checks.asked import ANNOTATIONS, DOCSTRING
from assistant.engine.contract import Request
from assistant.engine.definitions import asked, plan, rewrite
from assistant.engine.events import Delta, Result, Stats
from assistant.engine.output import Span

MODULE = '''"""A module."""

import math

RATE = 2


def area(r):
    return math.pi * r * r


@staticmethod
def documented(x: int) -> int:
    """Already documented."""
    return x


class Shape:
    sides = 0

    def __init__(self, name):
        self.name = name

    def grow(self, by: float) -> None:
        """Grow."""
        def inner(y):
            return y
        self.by = inner(by)


def typed(a: int, *rest: str) -> bool:
    return bool(a)
'''


def names(found):
    return None if found is None else ([part.name for part in found.parts], list(found.skipped))


@pytest.mark.parametrize("instruction, wanted", [
    ("Add a docstring to every function that lacks one.", ({DOCSTRING}, False)),
    ("Add docstrings.", ({DOCSTRING}, True)),
    ("Add docstrings to all functions and classes.", ({DOCSTRING}, True)),
    ("Document each method.", ({DOCSTRING}, False)),
    ("Add type hints to every function.", ({ANNOTATIONS}, False)),
    ("type hints everywhere", ({ANNOTATIONS}, False)),
    ("Add type hints.", ({ANNOTATIONS}, False)),
    ("Add type hints and docstrings to all functions.", ({ANNOTATIONS, DOCSTRING}, False)),
])
def test_instructions_that_ask_each_definition_qualify(instruction, wanted):
    kinds, classes = asked(instruction)
    assert (set(kinds), classes) == wanted


@pytest.mark.parametrize("instruction", [
    "Add a docstring.",  # one: which, is not said
    "Add a module docstring.",
    "Add a docstring to the module and every function.",  # the module's is in no definition
    "Improve the docstrings.",  # changes what exists: every definition would be skipped
    "Shorten every docstring.",
    "Add comments to every function.",  # nothing to tell a done definition by
    "Add logging to each method.",  # changes code, and needs an import outside any definition
    "Add docstrings and fix the bug.",
    "Rewrite every function.",
])
def test_other_instructions_do_not_qualify(instruction):
    assert asked(instruction) is None


def test_the_plan_finds_functions_methods_and_class_headers_and_skips_the_done():
    found = plan(MODULE, (0, len(MODULE)), "Add docstrings.", "python")
    assert names(found) == (["area", "Shape", "Shape.__init__", "Shape.grow", "typed"], ["documented"])
    spans = {part.name: MODULE[slice(*part.span)] for part in found.parts}
    assert spans["Shape"] == "class Shape:\n    sides = 0"  # the header: up to its first method
    assert spans["Shape.__init__"] == "    def __init__(self, name):\n        self.name = name"  # indentation in
    assert spans["area"].startswith("def area(r):") and spans["area"].endswith("r * r")


def test_a_done_definition_needs_every_definition_it_nests_done():
    """`Shape.grow` has a docstring, but its nested `inner` has none: it is rewritten, inner and all."""
    found = plan(MODULE, (0, len(MODULE)), "Add a docstring to every function.", "python")
    assert names(found) == (["area", "Shape.__init__", "Shape.grow", "typed"], ["documented"])


def test_type_hints_skip_the_functions_annotated_in_full():
    found = plan(MODULE, (0, len(MODULE)), "Add type hints to every function.", "python")
    assert names(found) == (["area", "Shape.__init__", "Shape.grow"], ["documented", "typed"])


def test_decorators_belong_to_their_definition():
    found = plan(MODULE, (0, len(MODULE)), "Add type hints and docstrings to all functions.", "python")
    documented = MODULE.index("@staticmethod")
    assert any(part.span[0] == documented for part in found.parts) is False  # done, so skipped
    decorated = MODULE.replace('    """Already documented."""\n', "")
    found = plan(decorated, (0, len(decorated)), "Add docstrings to all functions.", "python")
    assert decorated[slice(*found.parts[1].span)].startswith("@staticmethod\ndef documented")


@pytest.mark.parametrize("document, region, language", [
    (MODULE, None, "markdown"),  # not Python
    (MODULE, None, None),  # language unknown
    (MODULE.replace("def area(r):", "def area(r)"), None, "python"),  # does not parse
    (MODULE, (MODULE.index("def area"), MODULE.index("@static")), "python"),  # one definition
    (MODULE, (MODULE.index("def area"), MODULE.index("class Shape") + 5), "python"),  # cuts a definition
])
def test_what_falls_back_to_one_pass(document, region, language):
    assert plan(document, region or (0, len(document)), "Add docstrings.", language) is None


def test_an_instruction_naming_a_definition_falls_back():
    assert plan(MODULE, (0, len(MODULE)), "Add docstrings to the methods of Shape.", "python") is None


def test_a_selection_of_two_definitions_is_planned_alone():
    region = (MODULE.index("def area"), MODULE.index("class Shape"))
    assert names(plan(MODULE, region, "Add docstrings.", "python")) == (["area"], ["documented"])


# --- stitching, with scripted passes ------------------------------------------------------------------------

def scripted(answers: dict[str, tuple[str, str]], document: str, found, second=None, asked=None):
    """A pass per part that answers `answers[name]` (a second pass, with the sharper instruction: `second[name]`,
    else the same): (text, how it stopped); the text streams in two Deltas, each attributed to the part when it
    is the part's own text (offsets in the pass's answer, as a pass gives them). `asked` collects the passes'
    (name, instruction)."""
    by_span = {part.span: part.name for part in found.parts}

    def one_pass(part, instruction):
        part = part.span
        name = by_span[part]
        (asked if asked is not None else []).append((name, instruction))
        script = answers if instruction is None else {**answers, **(second or {})}
        text, stopped = script.get(name, (document[slice(*part)], "eos"))
        stats = Stats(len(text), 2, 0.5, 100, 0, 0, 0.1)
        half = len(text) // 2
        copied = text == document[slice(*part)]
        for a, b in ((0, half), (half, len(text))):
            yield Delta(text[a:b], [Span((a, b), (part[0] + a, part[0] + b) if copied else None)], 1, 0, 0, 0.25, stats)
        yield Result(text, [], stats, stopped, "model", "weights")
    return one_pass


def run(answers, document=MODULE, instruction="Add docstrings.", cancel=None, second=None, asked=None):
    found = plan(document, (0, len(document)), instruction, "python")
    events = list(rewrite(document, (0, len(document)), found, scripted(answers, document, found, second, asked),
                          cancel, ("model", "weights")))
    return events, found


def test_the_answer_keeps_the_text_between_definitions_verbatim():
    area = 'def area(r):\n    """The area."""\n    return math.pi * r * r'
    events, found = run({"area": (area, "eos")})
    result = events[-1]
    assert result.text == MODULE.replace("def area(r):\n    return math.pi * r * r", area)
    assert "".join(e.text for e in events if isinstance(e, Delta)) == result.text
    assert result.finished and result.pieces == [part.span for part in found.parts]
    assert result.definitions.edited == ("area",) and result.definitions.skipped == ("documented",)
    assert set(result.definitions.unchanged) == {"Shape", "Shape.__init__", "Shape.grow", "typed"}
    assert all(result.text[slice(*span.output)] == MODULE[slice(*span.source)] for span in result.token_spans
               if span.source)
    assert result.copied_share > 0.8  # kept text and the passes' copies alike
    # the definitions given back without a docstring had a second pass, which counts too
    assert result.stats.new_tokens == len(area) + 2 * sum(len(MODULE[slice(*p.span)]) for p in found.parts[1:])


@pytest.mark.parametrize("answer", [
    ('def area(r):\n    """The area."""\n    return math.pi', "length"),  # cut at the token limit
    ('def area(r):\n    """The area.\n    return math.pi * r * r', "eos"),  # does not parse in place
    ('def square(r):\n    """The area."""\n    return r * r', "eos"),  # not the same definition
    ('def area(r):\n    return r\n\n\ndef extra():\n    pass', "eos"),  # a definition more
])
def test_a_failed_pass_leaves_its_definition_as_it_was(answer):
    typed = 'def typed(a: int, *rest: str) -> bool:\n    """T."""\n    return bool(a)'
    events, _ = run({"area": answer, "typed": (typed, "eos")})
    result = events[-1]
    assert "def area(r):\n    return math.pi * r * r" in result.text and '"""The area.' not in result.text
    assert '"""T."""' in result.text  # the other passes still count
    assert result.definitions.failed == ("area",) and result.definitions.edited == ("typed",)
    assert result.finished and "".join(e.text for e in events if isinstance(e, Delta)) == result.text
    assert answer[0] not in "".join(e.text for e in events if isinstance(e, Delta))  # never shown


def test_a_definition_left_undone_gets_one_sharper_pass_and_the_better_answer_stands():
    asked = []
    shape = 'class Shape:\n    """A shape."""\n    sides = 0'
    init = ('    def __init__(self, name):\n        """Name it."""\n        self.name = "x"', "eos")  # changed code
    typed = ('def typed(a: int, *rest: str) -> bool:\n    """T."""\n    return bool(a)', "length")  # cut
    events, found = run({}, second={"Shape": (shape, "eos"), "Shape.__init__": init, "typed": typed}, asked=asked)
    result = events[-1]
    assert [name for name, instruction in asked if instruction is None] == [part.name for part in found.parts]
    sharper = {name: instruction for name, instruction in asked if instruction is not None}
    assert sorted(name for name, i in asked if i) == ["Shape", "Shape.__init__", "Shape.grow", "area", "typed"]
    assert sharper["Shape"].startswith("Add a docstring to `Shape`.")
    assert result.text == MODULE.replace("class Shape:\n    sides = 0", shape)  # the others as they were
    assert result.definitions.edited == ("Shape",) and result.finished
    assert set(result.definitions.retried) == set(sharper) and result.definitions.sharpened == ("Shape",)
    assert "".join(e.text for e in events if isinstance(e, Delta)) == result.text


def test_the_sharper_pass_names_the_parameters_left_to_annotate():
    found = plan(MODULE, (0, len(MODULE)), "Add type hints to every function.", "python")
    sharper = {part.name: part.sharper for part in found.parts}
    assert sharper["area"] == ("Add type hints to `area`. Annotate `r` and its return type (it returns a value: not "
                               "`-> None`). Keep its code as it is.")  # the 1.5B wrote `-> None` on such functions
    assert "Annotate `name` and its return type (`-> None`: it returns nothing)" in sharper["Shape.__init__"]
    assert "`self`" not in sharper["Shape.__init__"]
    assert sharper["Shape.grow"] == ("Add type hints to `Shape.grow` and to what it defines, `inner`. "
                                     "Keep its code as it is.")


def test_the_sharper_pass_names_the_nested_definitions_left_undone():
    """A function is done when what it defines is too (`asked.complete`): reprlib's `recursive_repr` stayed 88% done,
    its nested `wrapper` without a docstring."""
    nested = ('''def recursive_repr(fillvalue="..."):
    def decorating_function(user_function):
        """Documented."""
        def wrapper(self):
            return user_function(self)
        class Cached:
            pass
        return wrapper
    return decorating_function


def other():
    return 1
''')
    found = plan(nested, (0, len(nested)), "Add a docstring to every function.", "python")
    assert found.parts[0].sharper == ("Add a docstring to `recursive_repr` and to what it defines, `wrapper` and "
                                      "`Cached`. Keep its code as it is.")
    assert found.parts[1].sharper == "Add a docstring to `other`. Keep its code as it is."


def test_a_none_return_hint_on_a_function_that_returns_a_value_is_not_done():
    asked = []
    wrong = ("def area(r: float) -> None:\n    return math.pi * r * r", "eos")
    right = ("def area(r: float) -> float:\n    return math.pi * r * r", "eos")
    events, _ = run({"area": wrong}, instruction="Add type hints to every function.", second={"area": right},
                    asked=asked)
    assert ("area", None) in asked and "def area(r: float) -> float:" in events[-1].text


def test_an_init_left_without_a_return_hint_gets_none_without_a_model():
    asked = []
    init = ("    def __init__(self,\n                 name: str):  # named\n        self.name = name", "eos")
    events, _ = run({"Shape.__init__": init}, instruction="Add type hints to every function.", asked=asked)
    result = events[-1]
    assert "    def __init__(self,\n                 name: str) -> None:  # named\n        self.name = name" in result.text
    assert ("Shape.__init__", None) in asked and all(name != "Shape.__init__" for name, i in asked if i)  # done
    assert "".join(e.text for e in events if isinstance(e, Delta)) == result.text
    assert all(result.text[slice(*span.output)] == MODULE[slice(*span.source)] for span in result.token_spans
               if span.source)
    outputs = [span.output for span in result.token_spans]
    assert outputs == sorted(outputs) and all(a[1] <= b[0] for a, b in zip(outputs, outputs[1:]))
    docstrings, _ = run({"Shape.__init__": init})  # asked for docstrings: nothing written
    assert "-> None" not in docstrings[-1].text.split("class Shape")[1].split("def grow")[0]


def test_definitions_under_an_if_or_a_try_are_planned():
    document = ("try:\n    from fast import f\nexcept ImportError:\n    def f(x):\n        return x\n\n"
                "if True:\n    def g(y):\n        return y\n")
    found = plan(document, (0, len(document)), "Add a docstring to every function that lacks one.", "python")
    assert [part.name for part in found.parts] == ["f", "g"]
    assert document[slice(*found.parts[0].span)] == "    def f(x):\n        return x"


def test_a_cancel_ends_the_whole_answer():
    cancel = threading.Event()
    cancel.set()
    events, _ = run({}, cancel=cancel)
    result = events[-1]
    assert result.stopped == "cancelled" and not result.finished
    assert "def typed" not in result.text  # no pass after the one that saw the cancel, nor the text after it
    assert len([e for e in events if isinstance(e, Result)]) == 1


def test_with_every_definition_done_no_pass_runs():
    document = MODULE.replace("def area(r):\n", 'def area(r):\n    """A."""\n')
    events, found = run({}, document, "Add a docstring to every function that lacks one.")
    found_names = [part.name for part in found.parts]
    assert "area" not in found_names
    done = '"""Done."""\n'
    document = ('def first():\n    ' + done + '\n\ndef second():\n    ' + done)
    events, found = run({}, document, "Add a docstring to every function that lacks one.")
    result = events[-1]
    assert found.parts == () and result.text == document and result.finished and result.model == "model"
    assert result.definitions.skipped == ("first", "second")


# --- the engine (the embedded model) ------------------------------------------------------------------------

def test_every_pass_shares_the_whole_files_prompt_prefix(embedded_tokenizer):
    """The file comes first, as a whole-document edit shows it: the passes' prompts, and a warmed buffer's, agree
    up to the definition; each definition's tokens are attributed to its place in the file."""
    from assistant.decoding.prefix_cache import common_prefix
    from assistant.engine.prompts import definition_prompt, edit_prompt

    found = plan(MODULE, (0, len(MODULE)), "Add docstrings.", "python")
    first, second = (definition_prompt(embedded_tokenizer, "Add docstrings.", MODULE, part.span) for part in
                     found.parts[:2])
    whole = edit_prompt(embedded_tokenizer, "Fix it.", MODULE)
    file_tokens = len(embedded_tokenizer(MODULE, add_special_tokens=False)["input_ids"])
    first_ids, second_ids, whole_ids = (np.asarray(p.ids) for p in (first, second, whole))
    assert common_prefix(first_ids, second_ids) >= common_prefix(first_ids, whole_ids) > file_tokens
    start, end = found.parts[1].span
    assert any(source and start <= source[0] and source[1] <= end for source in second.sources[-60:])


def test_the_engine_edits_definition_by_definition(embedded, monkeypatch):
    """Through `run`: one stream, a pass per definition lacking a docstring, the file prefilled once and reused
    (prefix cache), and passes cut at the token limit leave their definitions as they were; with every pass cut
    and nothing edited, the answer stopped on the token limit, as a single pass would have."""
    from assistant.decoding import prefix_cache

    reused = []
    lookup = prefix_cache.PrefixCache.lookup
    monkeypatch.setattr(prefix_cache.PrefixCache, "lookup",
                        lambda self, ids, layers: (found := lookup(self, ids, layers), reused.append(found[1]))[0])
    events = list(embedded.rewrite(MODULE, "Add docstrings.", language="python", max_new_tokens=6, repairs=0))
    result = events[-1]
    assert isinstance(result, Result) and result.text == MODULE and result.stopped == "length"
    assert "".join(e.text for e in events if isinstance(e, Delta)) == MODULE
    assert set(result.definitions.failed) == {"area", "Shape", "Shape.__init__", "Shape.grow", "typed"}
    assert result.definitions.skipped == ("documented",) and len(result.pieces) == 5
    file_tokens = embedded.count_tokens(MODULE)
    assert len(reused) == 5 and all(n > file_tokens for n in reused[1:])
    assert all(MODULE[slice(*s.source)] == result.text[slice(*s.output)] for s in result.token_spans if s.source)


def test_a_docstring_pass_gets_room_for_the_docstring(embedded, monkeypatch):
    """A docstring is new text: each pass gets DOCSTRING_ROOM new tokens beyond the budget of a rewrite of its
    definition (a short function's docstring ran past it), a type-hint pass that budget alone."""
    from assistant.engine.assistant import Assistant
    from assistant.engine.definitions import DOCSTRING_ROOM
    from assistant.engine.long_documents import answer_budget

    budgets = []
    budget = Assistant.budget
    monkeypatch.setattr(Assistant, "budget", lambda self, *args: (budgets.append(budget(self, *args)), 2)[1])
    for instruction, more in (("Add docstrings.", DOCSTRING_ROOM), ("Add type hints to every function.", 0)):
        budgets.clear()
        result = embedded.rewrite_text(MODULE, instruction, language="python", repairs=0)
        assert budgets == [answer_budget(embedded.count_tokens(MODULE[slice(*part)])) + more for part in result.pieces]


def test_a_request_for_one_pass_gets_one_pass(embedded):
    """`by_definition=False` (the bench's `@one-pass`, the measure of the passes) gives the single pass an edit
    asked of each definition got before: no definitions, no pieces."""
    result = embedded.rewrite_text(MODULE, "Add docstrings.", language="python", max_new_tokens=6, repairs=0,
                                   by_definition=False)
    assert result.definitions is None and len(result.pieces) <= 1


def test_the_passes_share_the_file_prefix_with_reuse_across_requests_off(embedded, monkeypatch):
    """The bench turns the engine's prefix cache off (every strategy pays its own prefill); the passes of one
    answer still prefill the file once, and keep no more than the latest pass's prompt."""
    from assistant import config
    from assistant.decoding import prefix_cache

    reused, kept = [], []
    lookup, store = prefix_cache.PrefixCache.lookup, prefix_cache.PrefixCache.store
    monkeypatch.setattr(prefix_cache.PrefixCache, "lookup",
                        lambda self, ids, layers: (found := lookup(self, ids, layers), reused.append(found[1]))[0])
    monkeypatch.setattr(prefix_cache.PrefixCache, "store",
                        lambda self, *args: (store(self, *args), kept.append(len(self.entries)))[0])
    embedded.reuse_prefixes(0)
    try:
        embedded.rewrite_text(MODULE, "Add docstrings.", language="python", max_new_tokens=6, repairs=0)
    finally:
        embedded.reuse_prefixes(config.settings().prefix_cache_mb)
    assert len(reused) == 5 and all(n > embedded.count_tokens(MODULE) for n in reused[1:])
    assert kept and set(kept) == {1}


def test_special_methods_get_the_return_hint_the_data_model_fixes():
    module = MODULE.replace("    def grow(self, by: float) -> None:", "    def __str__(self):\n        return self.name\n\n"
                            "    def __len__(self) -> int:\n        return 0\n\n    def grow(self, by: float) -> None:")
    shape = ("class Shape:\n    sides: int = 0", "eos")
    text = "    def __str__(self):\n        return self.name"
    events, _ = run({"Shape": shape, "Shape.__str__": (text, "eos")}, instruction="Add type hints to every function.",
                    document=module)
    assert "    def __str__(self) -> str:\n        return self.name" in events[-1].text
    assert "def __len__(self) -> int:\n" in events[-1].text  # hinted already: left as it was
    rebinding = module.replace("RATE = 2", "str = bytes")  # `str` is not the builtin here: no hint
    events, _ = run({"Shape.__str__": (text, "eos")}, instruction="Add type hints to every function.",
                    document=rebinding)
    assert "    def __str__(self):\n" in events[-1].text


def test_a_default_a_type_hint_pass_added_is_put_back_and_the_pass_is_done():
    asked = []
    defaulted = ("def area(r: float = 1.0) -> float:\n    return math.pi * r * r", "eos")
    events, _ = run({"area": defaulted}, instruction="Add type hints to every function.", asked=asked)
    assert "def area(r: float) -> float:\n    return math.pi * r * r" in events[-1].text
    assert ("area", None) in asked and all(name != "area" for name, i in asked if i)  # done: no second pass


def test_a_completion_that_fails_leaves_the_passs_answer_as_it_was(monkeypatch):
    from assistant.engine import definitions

    def broken(*args):
        raise TypeError("a bug")
    monkeypatch.setattr(definitions, "completed", broken)
    init = ("    def __init__(self, name: str):\n        self.name = name", "eos")
    events, _ = run({"Shape.__init__": init}, instruction="Add type hints to every function.")
    assert "    def __init__(self, name: str):\n        self.name = name" in events[-1].text and events[-1].finished


@pytest.mark.parametrize("strategy", ["ar", "pld+h"])
def test_passes_side_by_side_give_the_answer_they_give_one_after_the_other(embedded, monkeypatch, strategy):
    """The passes of an edit decoded side by side (`decoding.lockstep`, each step of all of them one forward) give
    the answer and outcome of the same passes one after the other; side by side they ran. A round may cut a draft
    (`lockstep.allotted`), so a token drafted alone may be the model's own side by side: either way every token
    attributed to the buffer is a copy of what it is attributed to."""
    from assistant.decoding import lockstep

    widths, round_ = [], lockstep.Lockstep._round
    monkeypatch.setattr(lockstep.Lockstep, "_round", lambda self, reader: (round_(self, reader),
                                                                           widths.append(len(self.running)))[0])
    results = []
    for width in (1, 4):
        monkeypatch.setattr(embedded, "side_by_side", width)
        results.append(embedded.rewrite_text(MODULE, "Add docstrings and type hints to every function.",
                                             language="python", repairs=0, strategy=strategy, max_new_tokens=48))
    one, side = results
    assert (side.text, side.definitions, side.stopped) == (one.text, one.definitions, one.stopped)
    for result in (one, side):
        assert all(MODULE[slice(*span.source)] == result.text[slice(*span.output)]
                   for span in result.token_spans if span.source is not None)
    assert side.stats.new_tokens == one.stats.new_tokens and max(widths) > 1


def test_a_cancel_while_passes_run_side_by_side_stops_every_one_of_them(embedded, monkeypatch):
    """Cancelled after a few rounds, no pass makes another step (no forward after the cancel), and the answer is
    unfinished: stopped as cancelled."""
    from assistant.decoding import lockstep

    cancel, forwards = threading.Event(), []
    forward = lockstep.forward

    def counted(*args):
        forwards.append(cancel.is_set())
        if len(forwards) == 5:
            cancel.set()
        return forward(*args)

    monkeypatch.setattr(lockstep, "forward", counted)
    events = list(embedded.run(Request(MODULE, "Add docstrings.", language="python", repairs=0), cancel))
    result = events[-1]
    assert isinstance(result, Result) and result.stopped == "cancelled" and not result.finished
    assert len(forwards) == 5 and not any(forwards)  # none after the cancel
