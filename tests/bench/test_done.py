"""How much of an instruction an answer did (`done.py`), on small real code: type hints, docstrings,
f-strings and a rename, each counted by qualified name on the syntax tree; and the preserve task's
instructions mapped to their measure."""

from __future__ import annotations

import pytest

from assistant.bench import done, preserve

BEFORE = '''\
class Stack:
    def __init__(self, items=None):
        self.items = list(items or [])

    def push(self, item) -> None:
        """Put `item` on top."""
        self.items.append(item)

    @classmethod
    def of(cls, *items):
        return cls(items)


def describe(stack, sep=", "):
    text = sep.join("%s" % item for item in stack.items)
    return "<%d items: %s>" % (len(stack.items), text)
'''


def test_a_function_is_annotated_when_all_but_self_or_cls_and_its_return_are():
    functions = done.functions(BEFORE)
    assert sorted(functions) == ["Stack.__init__", "Stack.of", "Stack.push", "describe"]
    assert not any(done.has(f, done.HINTS) for f in functions.values())  # push lacks its parameter's hint
    hinted = done.functions("class C:\n    def f(self, x: int, *a: str, k: bool, **kw: int) -> None: ...\n"
                            "    @classmethod\n    def g(cls) -> 'C': ...\n")
    assert all(done.has(f, done.HINTS) for f in hinted.values())
    assert not done.has(done.functions("def f(x: int): ...\n")["f"], done.HINTS)  # no return hint: not complete
    assert not done.has(done.functions("def f(x: int, *args) -> None: ...\n")["f"], done.HINTS)


def test_hints_done_counts_the_functions_that_now_have_complete_hints():
    after = (BEFORE.replace("def __init__(self, items=None):", "def __init__(self, items: list | None = None) -> None:")
             .replace("def push(self, item) -> None:", "def push(self, item: object) -> None:"))
    assert done.hints_done(BEFORE, after) == 0.5  # __init__ and push of the four
    assert done.hints_done(BEFORE, BEFORE) == 0.0  # changed nothing: did nothing
    assert done.hints_done(BEFORE, after.replace("    @classmethod\n    def of(cls, *items):\n        return cls(items)\n",
                                                 "")) == 0.5  # Stack.of removed: not done, still asked
    assert done.hints_done(BEFORE, "def broken(:\n") == 0.0
    assert done.hints_done("def f(x: int) -> int:\n    return x\n", "") is None  # nothing was asked
    wrong = after.replace("def describe(stack, sep=\", \"):", "def describe(stack: Stack, sep: str = \", \") -> None:")
    assert done.hints_done(BEFORE, wrong) == 0.5  # `-> None` on a function that returns its text: not done
    assert done.hints_done(BEFORE, wrong.replace(") -> None:\n    text", ") -> str:\n    text")) == 0.75


def test_docstrings_done_counts_functions_and_classes_when_asked_by_qualified_name():
    after = BEFORE.replace("class Stack:\n", 'class Stack:\n    """A stack."""\n').replace(
        'def describe(stack, sep=", "):\n', 'def describe(stack, sep=", "):\n    """The stack, in words."""\n')
    assert done.docstrings_done(BEFORE, after, classes=True) == 0.5  # Stack, describe of the four
    assert done.docstrings_done(BEFORE, after) == 1 / 3  # "every function": describe of __init__, of, describe
    assert done.docstrings_done(BEFORE, BEFORE) == 0.0
    moved = "def describe(stack):\n    \"\"\"A docstring, but on another function.\"\"\"\n"
    assert done.docstrings_done("def show(stack):\n    pass\n", moved) == 0.0


def test_fstrings_done_is_the_share_of_percent_formats_converted():
    one_left = BEFORE.replace('sep.join("%s" % item for item in stack.items)', 'sep.join(f"{item}" for item in stack.items)')
    assert done.percent_formats(done.parsed(BEFORE)) == 2
    assert done.fstrings_done(BEFORE, one_left) == 0.5
    assert done.fstrings_done(BEFORE, BEFORE) == 0.0
    assert done.fstrings_done(BEFORE, "x = 1\n") == 1.0  # none left (whether kept is the tests' to say)
    assert done.fstrings_done("x = 10 % 3\n", "x = 10 % 3\n") is None  # a modulo is not a format


def test_rename_done_counts_the_occurrences_renamed_in_the_function():
    renamed = BEFORE.replace("text = sep", "words = sep").replace("len(stack.items), text)", "len(stack.items), words)")
    assert done.rename_done(BEFORE, renamed, "describe", "text", "words") == 1.0
    half = BEFORE.replace("text = sep", "words = sep")
    assert done.rename_done(BEFORE, half, "describe", "text", "words") == 0.5
    assert done.rename_done(BEFORE, BEFORE, "describe", "text", "words") == 0.0
    assert done.rename_done(BEFORE, renamed, "Stack.push", "text", "words") is None  # no such local there


@pytest.mark.parametrize("name", ["type-hints", "docstrings", "f-strings", preserve.RENAME_LOCAL])
def test_each_preserve_instruction_has_its_measure_and_the_module_itself_did_nothing(name):
    [record] = preserve.records(["quopri"], [name])
    assert preserve.share_done(record.source, record.source, record.instruction) == 0.0


def test_the_rename_instruction_is_read_back():
    [record] = preserve.records(["quopri"], [preserve.RENAME_LOCAL])
    match = preserve.RENAMED.match(record.instruction)
    assert record.instruction == preserve.RENAME.format(old=match["old"], function=match["function"], new=match["new"])
