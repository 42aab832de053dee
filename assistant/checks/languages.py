"""Which language a document is in, named as LSP `languageId`s, from a file name, a languageId or a shebang.

The checks pick their checker by language, and the editors that call this project already speak
LSP, so the names here are LSP's (`python`, `typescriptreact`, `cpp`, `shellscript`, `jsonc`, ...);
a few file names say more than their suffix (tsconfig.json has comments, Cargo.lock is TOML). Prose
(Markdown, plain text, reStructuredText) and anything unknown is `None`: there is nothing to
check a paragraph's rewrite against, and guessing a language wrongly would report false problems.
"""

from __future__ import annotations

import re
from pathlib import PurePath

EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".pyw": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascriptreact",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "typescriptreact",
    ".java": "java", ".go": "go", ".rs": "rust", ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp", ".hh": "cpp", ".hpp": "cpp", ".hxx": "cpp",
    ".cs": "csharp", ".kt": "kotlin", ".kts": "kotlin", ".rb": "ruby", ".php": "php",
    ".sh": "shellscript", ".bash": "shellscript", ".zsh": "shellscript",
    ".swift": "swift", ".scala": "scala", ".lua": "lua", ".hs": "haskell", ".dart": "dart",
    ".r": "r", ".pl": "perl", ".sql": "sql", ".html": "html", ".css": "css",
    ".json": "json", ".jsonc": "jsonc", ".ipynb": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml",
    ".ini": "ini", ".cfg": "ini", ".xml": "xml", ".svg": "xml", ".xsd": "xml", ".xsl": "xml", ".xslt": "xml",
    ".plist": "xml", ".csproj": "xml", ".fsproj": "xml", ".vbproj": "xml", ".props": "xml", ".targets": "xml",
    ".xaml": "xml",
}
# whole file names, lower-cased, whose suffix says another language or none
FILE_NAMES = {"devcontainer.json": "jsonc", ".devcontainer.json": "jsonc", ".eslintrc.json": "jsonc",
              "pipfile": "toml", "cargo.lock": "toml", "poetry.lock": "toml", "uv.lock": "toml",
              ".flake8": "ini", ".coveragerc": "ini", "pylintrc": "ini", ".pylintrc": "ini"}
PROSE = {"markdown", "plaintext", "text", "restructuredtext", "latex", "tex", "asciidoc", "org"}
_PROSE_EXTENSIONS = {".md", ".markdown", ".txt", ".rst", ".tex", ".adoc", ".org"}
_ALIASES = {"py": "python", "python3": "python", "js": "javascript", "jsx": "javascriptreact",
            "ts": "typescript", "tsx": "typescriptreact", "c++": "cpp", "cs": "csharp", "c#": "csharp",
            "sh": "shellscript", "bash": "shellscript", "shell": "shellscript", "zsh": "shellscript",
            "golang": "go", "rs": "rust", "kt": "kotlin", "rb": "ruby", "yml": "yaml",
            "dockercompose": "yaml", "github-actions-workflow": "yaml"}
_IDS = set(EXTENSIONS.values())
_INTERPRETERS = {"python": "python", "node": "javascript", "ruby": "ruby", "php": "php", "sh": "shellscript",
                 "bash": "shellscript", "zsh": "shellscript", "dash": "shellscript", "ksh": "shellscript"}


def language_of(path_or_language_id: str | None, text: str | None = None) -> str | None:
    """The LSP languageId of a document, from its file name or languageId, else from a shebang in `text`;
    None for prose and for what is not known."""
    name = (path_or_language_id or "").strip()
    lowered = name.lower()
    if lowered in _IDS:
        return lowered
    if lowered in _ALIASES:
        return _ALIASES[lowered]
    suffix = PurePath(name).suffix.lower() if name else ""
    if lowered in PROSE or suffix in _PROSE_EXTENSIONS:
        return None
    if named := _named(PurePath(lowered)):
        return named
    if suffix in EXTENSIONS:
        return EXTENSIONS[suffix]
    return _INTERPRETERS.get(_interpreter(text or ""))


def _named(path: PurePath) -> str | None:
    """The language a (lower-cased) file's name or folder says, where its suffix alone says another or none:
    JSON with comments for VS Code's own settings and TypeScript's configurations, TOML lock files, INI rc files."""
    if path.suffix == ".json" and (path.parent.name == ".vscode" or path.name.startswith(("tsconfig.", "jsconfig."))):
        return "jsonc"
    return FILE_NAMES.get(path.name)


def _interpreter(text: str) -> str:
    """The program a shebang line names, without its version ("python" for `#!/usr/bin/env python3`)."""
    if not text.startswith("#!"):
        return ""
    words = [word for word in text[2:].partition("\n")[0].split() if not word.startswith("-")]
    if words and PurePath(words[0]).name == "env":
        words = [word for word in words[1:] if "=" not in word]
    return re.sub(r"[0-9.]+$", "", PurePath(words[0]).name) if words else ""
