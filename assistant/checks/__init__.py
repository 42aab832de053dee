"""Checks of a rewrite for problems the edit introduced: broken names, syntax errors, changed code.

A 1.5B model asked to "Add type hints to every function." breaks about half the files it
rewrites: a `Tuple` used but never imported, a statement dropped, a constant changed, a public
function deleted. `check_edit` compares the whole document before and after an edit, with no
model involved, and reports only what the edit introduced, located in the after text: for
Python, ruff's pyflakes rules and syntax errors (`lint`); for other programming languages,
tree-sitter's syntax errors (`syntax`); for data formats (JSON, TOML, YAML, INI, XML), the
syntax errors their own parsers find (`formats`); and when the instruction asks only for annotations or
documentation (`preserving`), any change to the code itself (`structure` for Python, `comments`
for documentation edits elsewhere), and when it asks only for a rename (`renaming`), any change
to Python code but that rename (`rename`). Prose is not checked, and the `Check` says so in its notes.
Three functions say how to repair such an edit without a model, as `Fix`es of the after text:
`unbroken_edit` which of its changed lines to undo so that it no longer breaks the syntax,
`restorable_edit` how to undo the code it changed (Python), `default_edit` how to put back the default
values it changed and keep the hints beside them (Python), `hint_fix_edit` how to define the
names a type-hint edit used undefined, when that needs no guess (Python), and `fragment_edit` how to put
an answer that gave back only the definitions it added or changed into the file (Python).
"""

from __future__ import annotations

from assistant.checks.change import change_kind
from assistant.checks.comments import check_comments
from assistant.checks.fragment import fragment_fixes
from assistant.checks.hints import hint_fixes
from assistant.checks.instructions import preserving, renaming
from assistant.checks.languages import language_of
from assistant.checks.lint import check_python
from assistant.checks.rename import check_rename
from assistant.checks.report import Check, Fix, Problem, applied, combine
from assistant.checks.restore import restorable, restored_defaults
from assistant.checks.structure import check_structure
from assistant.checks.syntax import GRAMMARS, LANGUAGES, check_syntax
from assistant.checks.unbreak import unbreaking

__all__ = [
    "Check",
    "Fix",
    "Problem",
    "applied",
    "change_kind",
    "check_edit",
    "default_edit",
    "fragment_edit",
    "hint_fix_edit",
    "language_of",
    "preserving",
    "restorable_edit",
    "unbroken_edit",
]


def check_edit(before: str, after: str, *, language: str | None, instruction: str, timeout: float = 5.0) -> Check:
    """The problems that rewriting the document `before` into `after` on `instruction` introduced.

    `language` is an LSP languageId (see `language_of`); offsets in the result index `after`.
    `timeout` bounds each run of an external checker, in seconds."""
    if language is None:
        return Check(notes=("unchecked: prose or an unknown language",))
    kind, rename = preserving(instruction), renaming(instruction)
    if language == "python":
        checks = [check_python(before, after, timeout)]
        if kind is not None:
            checks.append(check_structure(before, after, kind))
        elif rename is not None:
            checks.append(check_rename(before, after, *rename))
        return combine(checks)
    if language not in LANGUAGES:
        return Check(notes=(f"unchecked: no checker for language {language!r}",))
    checks = [check_syntax(before, after, language)]
    if kind == "documentation" and language in GRAMMARS:
        checks.append(check_comments(before, after, language))
    elif kind == "documentation":
        note = f"structure not checked: documentation edits of {language} are checked for syntax only"
        checks.append(Check(notes=(note,)))
    elif kind == "annotations":
        checks.append(Check(notes=("structure not checked: annotation edits are compared in Python only",)))
    return combine(checks)


def restorable_edit(before: str, after: str, *, language: str | None, instruction: str) -> list[Fix]:
    """For a Python edit that should only annotate or document: the Fixes that undo the code it changed,
    removed or added (restore.restorable); else none."""
    kind = preserving(instruction)
    return restorable(before, after, kind) if language == "python" and kind is not None else []


def default_edit(before: str, after: str, *, language: str | None, instruction: str) -> list[Fix]:
    """For a Python edit that should only annotate or document: the Fixes that put back the parameters' default
    values it added, changed or removed (restore.restored_defaults); else none."""
    return restored_defaults(before, after) if language == "python" and preserving(instruction) is not None else []


def unbroken_edit(before: str, after: str, *, language: str | None, instruction: str) -> list[Fix]:
    """For an edit that should only annotate or document, in a language with a parser: the changed lines of
    `after` to put back as `before` had them so that it has no syntax error `before` lacks (unbreak.unbreaking)."""
    kind = preserving(instruction)
    return unbreaking(before, after, language) if language is not None and kind is not None else []


def hint_fix_edit(before: str, after: str, *, language: str | None, instruction: str) -> list[Fix]:
    """For a Python edit that should only add type hints: the `typing` imports it forgot and the forward
    references it did not quote (hints.hint_fixes)."""
    return hint_fixes(before, after) if language == "python" and preserving(instruction) == "annotations" else []


def fragment_edit(before: str, after: str, *, language: str | None, instruction: str) -> list[Fix]:
    """For a Python answer that is a fragment (the definitions it added or changed, the rest left out and its
    names left undefined): the Fixes that put back the statements it lacks (fragment.fragment_fixes)."""
    return fragment_fixes(before, after) if language == "python" else []
