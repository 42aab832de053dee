"""The import a type-hint edit forgot: names it took from `typing` and never imported.

Asked for type hints, a 1.5B model writes `Tuple[float, float]` or `typing.Optional[str]` and no
import, and the module fails at import with a NameError (ruff's F821). Which import such a name
needs is no guess when it is `typing` itself or a name `typing` exports, so `typing_imports` writes
it: `import typing`, and one `from typing import ...` for the names, put on their own lines before
the module's first statement that is neither its docstring nor a `from __future__` import. Any
other undefined name is left to a repair pass of the model.
"""

from __future__ import annotations

import ast
import typing

from assistant.checks.lint import check_python
from assistant.checks.positions import LineIndex
from assistant.checks.report import Fix

TYPING_NAMES = frozenset(typing.__all__)


def typing_imports(before: str, after: str) -> list[Fix]:
    """The insertion of the imports of the `typing` names that `after` uses undefined where `before` did not
    (ruff's F821), or none when there are none or `after` does not parse."""
    problems = check_python(before, after).problems
    names = {after[problem.start:problem.end] for problem in problems if problem.code == "F821"}
    lines = ["import typing\n"] if "typing" in names else []
    imported = sorted(names & TYPING_NAMES)
    lines += [f"from typing import {', '.join(imported)}\n"] if imported else []
    at = _first_statement(after)
    return [Fix(at, at, "".join(lines), None)] if lines and at is not None else []


def _first_statement(text: str) -> int | None:
    """The offset of the line of a module's first statement after its docstring and `__future__` imports
    (the end of the text when there is none, on a line of its own); None if the text does not parse."""
    try:
        body = ast.parse(text).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    while body and isinstance(body[0], ast.ImportFrom) and body[0].module == "__future__":
        body = body[1:]
    if not body:
        return len(text) if text.endswith(("\n", "\r")) or not text else None
    first = min([body[0].lineno, *(decorator.lineno for decorator in getattr(body[0], "decorator_list", []))])
    return LineIndex(text).offset(first - 1, 0)
