"""Syntax errors an edit introduced in languages other than Python: by tree-sitter, or a data format's own parser.

Tree-sitter parses any text and marks what it could not fit into its grammar with ERROR nodes
and what it had to assume with MISSING nodes, so it finds a rewrite's broken braces and dropped
semicolons in Java, JavaScript, TypeScript, Go, Rust, C, C++, C#, Kotlin, Ruby, PHP and shell
scripts without compiling anything. Grammars come from the per-language `tree-sitter-*` wheels
(self-contained, no download at run time) and are loaded once per language. Both texts are
parsed; when the after text has more such nodes than the before text, the new ones (those whose
line the before text lacks first) are reported at their place in the after text. Data formats
(JSON, TOML, YAML, INI, XML) are checked by the parsers their readers use instead (`formats`).
"""

from __future__ import annotations

import importlib
from functools import cache

from tree_sitter import Language, Node, Parser, Tree

from assistant.checks.formats import FORMATS, check_format
from assistant.checks.positions import encode, introduced, str_offset
from assistant.checks.report import Check, Problem

# LSP languageId: (grammar module, function returning the grammar)
GRAMMARS = {
    "javascript": ("tree_sitter_javascript", "language"),
    "javascriptreact": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "typescriptreact": ("tree_sitter_typescript", "language_tsx"),
    "java": ("tree_sitter_java", "language"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
    "csharp": ("tree_sitter_c_sharp", "language"),
    "kotlin": ("tree_sitter_kotlin", "language"),
    "ruby": ("tree_sitter_ruby", "language"),
    "php": ("tree_sitter_php", "language_php"),
    "shellscript": ("tree_sitter_bash", "language"),
}
LANGUAGES = frozenset(GRAMMARS) | frozenset(FORMATS)  # the languages whose syntax `check_syntax` checks


class GrammarError(Exception):
    """No grammar could be loaded for a language; the message says why, for the check's notes."""


@cache
def grammar(language: str) -> Language:
    """The tree-sitter grammar of an LSP languageId, loaded once."""
    module_name, function = GRAMMARS[language]
    try:
        module = importlib.import_module(module_name)
        return Language(getattr(module, function)())
    except ImportError:
        raise GrammarError(f"unchecked: the tree-sitter grammar for {language!r} is not installed") from None
    except (AttributeError, ValueError, TypeError) as error:
        raise GrammarError(f"unchecked: the tree-sitter grammar for {language!r} cannot load: {error}") from None


def parse(language: str, data: bytes) -> Tree:
    """The syntax tree of UTF-8 `data` (a parser per call: parsers are cheap, and not for sharing between threads)."""
    return Parser(grammar(language)).parse(data)


def syntax_errors(tree: Tree) -> list[Node]:
    """The outermost ERROR nodes and the MISSING nodes of a tree, in document order (a leaf with an error
    is one whose only, hidden, child is MISSING)."""
    found: list[Node] = []
    pending = [tree.root_node]
    while pending:
        node = pending.pop()
        if node.is_error or node.is_missing or (node.has_error and node.child_count == 0):
            found.append(node)
        elif node.has_error:
            pending.extend(reversed(node.children))
    return found


def _message(node: Node) -> str:
    if node.is_missing or node.start_byte == node.end_byte:
        return f"syntax error: missing `{node.type}`"
    text = (node.text or b"").decode("utf-8", "replace").split("\n")[0].strip()
    return f"syntax error: unexpected `{text[:40]}`" if text else "syntax error"


def _context(node: Node, data: bytes) -> str:
    """The line a node starts on, stripped: where a finding was, to tell an old one from a new one."""
    start = data.rfind(b"\n", 0, node.start_byte) + 1
    end = data.find(b"\n", node.start_byte)
    return data[start:end if end >= 0 else len(data)].decode("utf-8", "replace").strip()


def check_syntax(before: str, after: str, language: str) -> Check:
    """The syntax errors that `after` has and `before` had not: by the format's parser for a data format
    (`formats.check_format`), else by tree-sitter."""
    if language in FORMATS:
        return check_format(before, after, language)
    try:
        old_data, new_data = encode(before), encode(after)
        old, new = syntax_errors(parse(language, old_data)), syntax_errors(parse(language, new_data))
    except GrammarError as error:
        return Check(notes=(str(error),))
    found = [("syntax", _context(node, new_data),
              Problem(_message(node), str_offset(new_data, node.start_byte), str_offset(new_data, node.end_byte),
                      "syntax", "tree-sitter"))
             for node in new]
    return Check(tuple(introduced((("syntax", _context(node, old_data)) for node in old), found)), ("tree-sitter",))
