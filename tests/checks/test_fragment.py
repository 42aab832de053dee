"""An answer that is a fragment of the file (checks/fragment.py): told from a deliberate deletion, and put
into the file with the statements it lacks back where they were."""

from __future__ import annotations

import ast

from assistant.checks import applied, fragment_edit

BEFORE = '''"""Shapes."""

from math import pi

# the sides of a polygon
SIDES = {"square": 4}


class Shape:
    def area(self) -> float:
        return 0.0


@staticmethod
def circle(r: float) -> float:
    return pi * r * r


def square(a: float) -> float:
    return a * a
'''


def merged(answer: str, before: str = BEFORE) -> str:
    return applied(answer, fragment_edit(before, answer, language="python", instruction="Add a class Circle."))


def test_an_answer_with_only_the_new_class_is_put_into_the_file():
    answer = "class Circle(Shape):\n    def area(self) -> float:\n        return circle(1.0)\n"
    assert merged(answer) == BEFORE + "\n\n" + answer  # the file first: the new class builds on it


def test_a_changed_definition_keeps_the_answers_version_in_the_files_place():
    answer = "def circle(r: float) -> float:\n    return 2 * pi * r\n"
    changed = BEFORE.replace("@staticmethod\ndef circle(r: float) -> float:\n    return pi * r * r", answer[:-1])
    assert merged(answer) == changed
    answer = "import os\n\n\n" + answer  # a statement of its own before the first it kept
    assert merged(answer) == changed.replace("def circle", "import os\n\n\ndef circle")


def test_the_fixes_restore_the_text_before_at_their_source():
    answer = "def circle(r: float) -> float:\n    return 2 * pi * r\n"
    for fix in fragment_edit(BEFORE, answer, language="python", instruction="x"):
        assert fix.source is None or fix.text == BEFORE[slice(*fix.source)]


def test_a_deliberate_deletion_or_an_answer_that_keeps_most_of_the_file_stands():
    without_square = BEFORE.split("\n\ndef square")[0] + "\n"
    assert fragment_edit(BEFORE, without_square, language="python", instruction="Remove square.") == []
    names_nothing = "def cube(a: float) -> float:\n    return a ** 3\n"  # every name defined: a new file, say
    assert fragment_edit(BEFORE, names_nothing, language="python", instruction="x") == []
    most = BEFORE.replace("def square(a: float) -> float:\n    return a * a\n", "def cube(a):\n    return square(a) * a\n")
    assert fragment_edit(BEFORE, most, language="python", instruction="x") == []  # 1 of 3 gone: not a fragment
    assert fragment_edit(BEFORE, "def f(:\n", language="python", instruction="x") == []
    assert fragment_edit(BEFORE, "x = Shape\n", language="javascript", instruction="x") == []
