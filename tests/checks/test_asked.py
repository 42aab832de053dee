"""What a documenting or annotating edit asks of a definition, and hints that are wrong (`checks.asked`)."""

from __future__ import annotations

import ast

import pytest

from assistant.checks.asked import by_name, none_but_returns


@pytest.mark.parametrize("source, wrong", [
    ("def f() -> None:\n    if x:\n        return 1\n", True),
    ("def f() -> None:\n    try:\n        pass\n    except E:\n        return 2\n", True),
    ("def f() -> None:\n    return\n", False),
    ("def f() -> None:\n    return None\n", False),
    ("def f() -> None:\n    def g():\n        return 1\n    return\n", False),  # g's return is g's
    ("def f() -> int:\n    return 1\n", False),
    ("def f():\n    return 1\n", False),
    ("def f() -> None:\n    yield 1\n", True),  # a generator
    ("def f() -> None:\n    g = lambda: (yield)\n", False),  # the lambda's
])
def test_a_none_return_hint_is_wrong_where_the_function_returns_a_value(source, wrong):
    assert none_but_returns(ast.parse(source).body[0]) is wrong


def test_definitions_by_qualified_name_include_those_under_an_if_or_a_try():
    source = "try:\n    import a\nexcept ImportError:\n    def f(): pass\nclass C:\n    if X:\n        def m(self): pass\n"
    assert list(by_name(ast.parse(source))) == ["f", "C", "C.m"]
