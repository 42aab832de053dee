"""Every `assistant ...` command line in the user-facing markdown parses: no doc names a flag, a
choice or a subcommand the code lacks. And `assistant rewrite` loads no other door's libraries."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.cli import parser_for

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "editors" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"^(?:\$ )?(?:\S*/)?assistant (\w.*)$")
INLINE = re.compile(r"`(?:\S*/)?assistant ((?:rewrite|lsp|web|bench|calibrate|serve)\b[^`]*)`")


def command_lines(text: str) -> list[str]:
    """The command lines of a markdown text: in code blocks (continued by a trailing backslash) and inline."""
    found = [line for line in INLINE.findall(text) if " " in line.strip()]  # a bare `assistant web` names a door
    blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", text, re.S)
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            if match := COMMAND.match(line.strip()):
                found.append(match.group(1))
    return [line.split(" #")[0].strip() for line in found]


def synopsis(line: str) -> bool:
    """A usage line with placeholders (`[--flag]`, `PATH...`, `-i INSTRUCTION`), not a command to run."""
    return any(mark in line for mark in ("[", "...", "|")) or re.search(r"\b[A-Z]{2,}\b", line) is not None


DOCUMENTED = sorted({(path.relative_to(ROOT).as_posix(), line) for path in DOCS
                     for line in command_lines(path.read_text(encoding="utf-8")) if not synopsis(line)})


def test_the_docs_show_commands():
    assert len(DOCUMENTED) >= 8 and any(path == "README.md" for path, _ in DOCUMENTED)


@pytest.mark.parametrize("path, line", DOCUMENTED)
def test_a_documented_command_parses(path, line):
    argv = shlex.split(line)
    try:
        parser_for(argv).parse_args(argv)
    except SystemExit as exit:
        pytest.fail(f"{path}: `assistant {line}` does not parse (exit {exit.code})")


def test_the_rewrite_command_loads_no_other_door():
    code = ("import sys\nfrom assistant.cli import main\n"
            "try:\n    main(['rewrite', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pygls', 'fastapi', 'uvicorn', 'matplotlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stderr
