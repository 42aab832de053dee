"""The problems a Python edit introduced, as ruff's pyflakes rules and syntax errors find them.

Ruff's F rules catch what a small model's rewrites break most often: a name used but never
imported (`Tuple` without `from typing import Tuple`), a call to a function the edit deleted, a
variable whose assignment was dropped, an `__all__` naming what no longer exists, and syntax
errors. Ruff is run on the text before and on the text after the edit (the two at once), and a
diagnostic counts as introduced when the after text has more of its (code, message) than the
before text had: lines move in an edit, so diagnostics are matched by what they say, not where.
The binary comes from the `ruff` package (`ruff.find_ruff_bin`, else beside this interpreter);
a missing binary, a crash or a timeout becomes a note in the `Check`, never an exception.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from assistant.checks.positions import LineIndex, encode, introduced
from assistant.checks.report import Check, Problem

ARGUMENTS = ("check", "--select", "F,E9", "--output-format", "json", "--no-cache", "--isolated",
             "--exit-zero", "--stdin-filename", "edited.py", "-")
SYNTAX_CODES = {None, "invalid-syntax", "E999"}


class RuffError(Exception):
    """Ruff could not give an answer; the message says why, for the check's notes."""


def find_ruff() -> str | None:
    """The ruff binary of the `ruff` package, else one beside this interpreter, else on PATH; None if none."""
    try:
        from ruff import find_ruff_bin

        return os.fsdecode(find_ruff_bin())
    except (ImportError, FileNotFoundError):
        pass
    beside = Path(sys.executable).parent / "ruff"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    from shutil import which

    return which("ruff")


def run_ruff(binary: str, text: str, timeout: float) -> list[dict[str, Any]]:
    """Ruff's diagnostics of a Python text, as its JSON output lists them."""
    try:
        done = subprocess.run([binary, *ARGUMENTS], input=encode(text), capture_output=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        raise RuffError(f"ruff timed out after {timeout:g} s") from None
    except OSError as error:
        raise RuffError(f"ruff could not start: {error}") from None
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"exit status {done.returncode}"]
        raise RuffError(f"ruff failed: {reason[-1]}")
    try:
        diagnostics = json.loads(done.stdout)
    except ValueError:
        raise RuffError("ruff failed: its output is not JSON") from None
    if not isinstance(diagnostics, list):
        raise RuffError("ruff failed: its output is not a list of diagnostics")
    return diagnostics


def _kind(diagnostic: dict[str, Any]) -> tuple[str, str]:
    """A diagnostic's code and message, syntax errors under the code "syntax"."""
    code, message = diagnostic.get("code"), str(diagnostic.get("message", ""))
    if code in SYNTAX_CODES:
        return "syntax", f"syntax error: {message.removeprefix('SyntaxError: ')}"
    return str(code), message


def _row(diagnostic: dict[str, Any], field: str) -> int:
    return int((diagnostic.get(field) or {}).get("row") or 1) - 1


def _problem(diagnostic: dict[str, Any], lines: LineIndex) -> Problem:
    """A ruff diagnostic as a Problem, its 1-based rows and character columns turned into offsets."""
    code, message = _kind(diagnostic)
    start_at, end_at = diagnostic.get("location") or {}, diagnostic.get("end_location") or {}
    start = lines.offset(_row(diagnostic, "location"), int(start_at.get("column") or 1) - 1)
    end = lines.offset(_row(diagnostic, "end_location"), int(end_at.get("column") or 1) - 1) if end_at else start
    return Problem(message, start, max(start, end), code, "ruff")


def check_python(before: str, after: str, timeout: float = 5.0) -> Check:
    """The ruff diagnostics that `after` has and `before` had not; a note instead if ruff cannot run."""
    binary = find_ruff()
    if binary is None:
        return Check(notes=("ruff is not installed",))
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(run_ruff, binary, text, timeout) for text in (before, after)]
    try:
        old, new = (run.result() for run in runs)
    except RuffError as error:
        return Check(notes=(str(error),))
    old_lines, new_lines = LineIndex(before), LineIndex(after)
    found = [(_kind(diagnostic), new_lines.line(_row(diagnostic, "location")).strip(), _problem(diagnostic, new_lines))
             for diagnostic in new]
    known = [(_kind(diagnostic), old_lines.line(_row(diagnostic, "location")).strip()) for diagnostic in old]
    return Check(tuple(introduced(known, found)), ("ruff",))
