"""Syntax errors an edit introduced in data formats (JSON, JSON with comments, TOML, YAML, INI, XML).

A configuration file that an edit breaks breaks the program that reads it (npm on a package.json
with a missing comma, pip on a pyproject.toml with an unclosed string), so these files are checked
as code is, each by the parser its readers use: `json`, `tomllib`, `configparser` and expat
(`xml.etree`) from the standard library, and PyYAML. JSON with comments (`jsonc`: tsconfig.json,
VS Code's settings) is JSON once its comments and trailing commas are blanked out, offsets kept.

These parsers stop at the first error (configparser lists every bad line), so errors are not
counted by kind as tree-sitter's are: an error of the text after is the edit's when the text
before has no error on a line with the same text. An edit to a file that was already broken is
thus not blamed for the old error, and is blamed for a new one it placed before it (one after it
stays unseen behind the old, as the file's readers would not see it either).
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from bisect import bisect_right
from collections.abc import Callable
from xml.etree import ElementTree

import yaml

from assistant.checks.positions import LineIndex, introduced
from assistant.checks.report import Check, Problem

Error = tuple[str, int]  # a parser's message, and the offset in the text where it found the error
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where PyYAML was built with it
_TOML_AT = re.compile(r" \(at line (\d+), column (\d+)\)$| \(at end of document\)$")
# a JSON string (kept), a comment, or a comma with only blanks and comments before its closing bracket
_JSONC_BLANKS = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/|,(?=(?:\s|//[^\n]*|/\*.*?\*/)*[]}])', re.DOTALL)


def json_errors(text: str) -> list[Error]:
    """Where `text` stops being JSON (RFC 8259 as Python's json reads it), as at most one error: a missing
    delimiter where it belongs, right after the value before it, not at the next token on a later line."""
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return [(error.msg, len(text[:error.pos].rstrip()) if error.msg.endswith("delimiter") else error.pos)]
    except RecursionError:
        return [("nested too deeply to read", 0)]
    return []


def jsonc_errors(text: str) -> list[Error]:
    """Where `text` stops being JSON with comments and trailing commas, as VS Code reads its settings."""
    return json_errors(_JSONC_BLANKS.sub(_blank, text))


def _blank(match: re.Match[str]) -> str:
    """A string as it is; a comment or trailing comma as spaces, its line breaks kept, so offsets stay."""
    found = match.group()
    return found if found.startswith('"') else re.sub(r"[^\r\n]", " ", found)


def toml_errors(text: str) -> list[Error]:
    """Where `text` stops being TOML 1.0 (tomllib), as at most one error."""
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        at = _TOML_AT.search(message)
        if at is None:
            return [(message, 0)]
        offset = len(text) if at.group(1) is None else _newline_offset(text, int(at.group(1)) - 1, int(at.group(2)) - 1)
        return [(message[:at.start()], offset)]
    return []


def yaml_errors(text: str) -> list[Error]:
    """Where `text` stops being a YAML stream (composed, not constructed: any tag is allowed), as at most one."""
    try:
        for _ in yaml.compose_all(text, Loader=YAML_LOADER):
            pass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        return [(error.problem or error.context or "not YAML", mark.index if mark else 0)]
    except yaml.reader.ReaderError as error:
        return [(error.reason, error.position)]
    except (yaml.YAMLError, RecursionError) as error:
        return [(str(error).partition("\n")[0] or "not YAML", 0)]
    return []


def ini_errors(text: str) -> list[Error]:
    """The lines of `text` that Python's configparser (which setuptools, tox, pytest, flake8 and mypy read
    their INI files with) rejects: bad lines all, else the first missing section or duplicate."""
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys as written: `Name` is not `name`
    try:
        parser.read_string(text)
    except configparser.MissingSectionHeaderError as error:
        return [("a setting before any [section]", _newline_offset(text, error.lineno - 1, 0))]
    except configparser.ParsingError as error:
        return [("neither a [section], a `key = value` setting nor a comment", _newline_offset(text, row - 1, 0))
                for row, _ in error.errors]
    except (configparser.DuplicateSectionError, configparser.DuplicateOptionError) as error:
        return [(error.message.partition("]: ")[2] or error.message, _newline_offset(text, error.lineno - 1, 0))]
    return []


def xml_errors(text: str) -> list[Error]:
    """Where `text` stops being well-formed XML (expat), as at most one error."""
    try:
        ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        line, column = error.position
        return [(str(error).rpartition(": line ")[0] or "not well-formed", LineIndex(text).offset(line - 1, column))]
    return []


# LSP languageId: (the checker's name, what finds the errors)
FORMATS: dict[str, tuple[str, Callable[[str], list[Error]]]] = {
    "json": ("json", json_errors),
    "jsonc": ("json", jsonc_errors),
    "toml": ("tomllib", toml_errors),
    "yaml": ("pyyaml", yaml_errors),
    "ini": ("configparser", ini_errors),
    "xml": ("expat", xml_errors),
}


def _newline_offset(text: str, row: int, column: int) -> int:
    """The offset of a 0-based row and character column, rows counted by `\\n` alone (as tomllib and
    configparser count them), clamped to the text."""
    start = 0
    for _ in range(row):
        start = text.find("\n", start) + 1
        if start == 0:
            return len(text)
    return min(start + column, len(text))


def _context(lines: LineIndex, offset: int) -> str:
    """The stripped text of the line an offset is on: where an error was, to tell an old one from a new one."""
    return lines.line(bisect_right(lines.starts, offset) - 1).strip()


def check_format(before: str, after: str, language: str) -> Check:
    """The syntax errors that `after` has on lines whose text `before` has no error on (see the module)."""
    checker, errors = FORMATS[language]
    old_lines, new_lines = LineIndex(before), LineIndex(after)
    old = [(context, context) for context in (_context(old_lines, at) for _, at in errors(before))]
    found = []
    for message, at in errors(after):
        end = at + 1 if at < len(after) and after[at] not in "\r\n" else at
        context = _context(new_lines, at)
        found.append((context, context, Problem(f"syntax error: {message}", at, end, "syntax", checker)))
    return Check(tuple(introduced(old, found)), (checker,))
