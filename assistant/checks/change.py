"""Whether an answer changed anything: an answer that gives the text back, or changes only its layout
(whitespace, line breaks, the quotes of a string) or its comments, made no change to what the text says
or does, and no door may report it as a plain success.

Python is compared on its syntax tree (which holds neither layout, quotes nor comments) and its comments
(from the tokenizer); any other text with its whitespace taken out.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize

NONE, LAYOUT, COMMENTS, EDIT = "none", "layout", "comments", "edit"
_SPACE = re.compile(r"\s+")


def change_kind(before: str, after: str, language: str | None = None) -> str:
    """NONE when `after` is `before`; LAYOUT when it differs only in whitespace, line breaks or quotes;
    COMMENTS when it also differs in (Python) comments, and nothing else; EDIT otherwise."""
    if before == after:
        return NONE
    if language == "python" and (kind := python_change(before, after)) is not None:
        return kind
    return LAYOUT if _SPACE.sub("", before) == _SPACE.sub("", after) else EDIT


def python_change(before: str, after: str) -> str | None:
    """LAYOUT, COMMENTS or EDIT for two Python texts; None when either does not parse."""
    try:
        same_tree = ast.dump(ast.parse(before)) == ast.dump(ast.parse(after))
        if not same_tree:
            return EDIT
        return LAYOUT if comments(before) == comments(after) else COMMENTS
    except (SyntaxError, ValueError, tokenize.TokenError):
        return None


def comments(text: str) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [token.string.rstrip() for token in tokens if token.type == tokenize.COMMENT]
