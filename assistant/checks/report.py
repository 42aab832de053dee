"""What a check of an edit found: the problems the edit introduced, and which checks ran.

A check compares the document before and after a rewrite and keeps only what the rewrite
introduced, so a caller can show those problems beside the new text without blaming the model
for the old text's faults. `Check.notes` says plainly what could not be checked and why (no
checker for the language, a linter missing or too slow), so an empty problem list is never
mistaken for a clean bill of health: `Check.checked` is false when nothing ran at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True)
class Problem:
    """One problem the edit introduced, located by Python string offsets into the text after the edit."""

    message: str
    start: int
    end: int
    code: str  # a ruff rule code ("F821"), "syntax" or "changed-code"
    checker: str  # "ruff", "tree-sitter" or "structure"

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "start": self.start, "end": self.end, "code": self.code,
                "checker": self.checker}


class Fix(NamedTuple):
    """A change to the text after an edit that a repair can make without a model: its range `start`..`end`
    becomes `text`, which is the text before the edit at `source` (restored) or, when that is None, new."""

    start: int
    end: int
    text: str
    source: tuple[int, int] | None


def restoring(before: str, after_range: tuple[int, int], before_range: tuple[int, int]) -> Fix:
    """The Fix that puts `before`'s range back in place of a range of the after text."""
    return Fix(*after_range, before[slice(*before_range)], before_range)


def applied(text: str, fixes: list[Fix]) -> str:
    """`text` with each of `fixes` (whose ranges do not overlap) made; insertions at one place in their order."""
    for _, fix in sorted(enumerate(fixes), key=lambda item: (item[1].start, item[1].end, item[0]), reverse=True):
        text = text[:fix.start] + fix.text + text[fix.end:]
    return text


@dataclass(frozen=True)
class Check:
    """The problems an edit introduced, the checks that ran, and notes on what could not run and why."""

    problems: tuple[Problem, ...] = ()
    ran: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def checked(self) -> bool:
        """Whether at least one check ran."""
        return bool(self.ran)

    def to_json(self) -> dict[str, Any]:
        return {"problems": [problem.to_json() for problem in self.problems], "ran": list(self.ran),
                "notes": list(self.notes), "checked": self.checked}


def combine(checks: list[Check]) -> Check:
    """The problems, checks run and notes of several checks of one edit, in order."""
    problems = tuple(problem for check in checks for problem in check.problems)
    return Check(tuple(sorted(problems, key=lambda problem: (problem.start, problem.end))),
                 tuple(name for check in checks for name in check.ran),
                 tuple(note for check in checks for note in check.notes))
