"""Whether an instruction asks only for annotations or documentation, which must leave the code as it was.

"Add type hints to every function." and "Write docstrings for this class." ask for additions that
change nothing a program does, so any other difference in the rewrite (a changed constant, a
deleted line) is a fault the structure check can name. The decision is a keyword classifier and
deliberately conservative: every sentence or clause of the instruction must be about type hints,
annotations, docstrings or comments, and none may ask for anything that changes code ("and fix
the bug", "refactor", "rename", "add a function"); otherwise `preserving` says None and the
structure check does not run, since a false "the edit changed code" would blame a correct rewrite.
"""

from __future__ import annotations

import re

_ANNOTATIONS = re.compile(r"\btype[- ]?(?:hint|annotation|signature)s?\b|\btype[- ]?hint(?:ed|ing)\b"
                          r"|\bannotat\w*|\btyping\b|\bstatic(?:ally)? typ\w*|\bmypy\b"
                          r"|\badd (?:the |missing |proper |full )?types\b")
_DOCUMENTATION = re.compile(r"\bdoc[- ]?strings?\b|\bcomment(?:s|ed|ing)?\b|\bdocument\w*|\bjavadocs?\b|\bjsdocs?\b"
                            r"|\bdoc[- ]?comments?\b")
_CODE_CHANGE = re.compile(
    r"\b(?:fix\w*|bugs?|refactor\w*|renam\w*|rewrit\w*|optimi[sz]\w*|simplif\w*|implement\w*|convert\w*|replac\w*"
    r"|delet\w*|remov\w*|mov(?:e|es|ed|ing)|extract\w*|reorder\w*|sort\w*|handl\w*|validat\w*|tests?|speed\w*"
    r"|faster|slower|performance|port|inline|split\w*|merg\w*|chang\w*|modif\w*|reformat\w*|lint\w*"
    r"|rais\w*|exceptions?|errors?|logg\w*|print\w*|assert\w*|check\w*|vectori[sz]\w*|parallel\w*)\b")
_CODE_ADDITION = re.compile(r"\b(?:add|write|create|insert|introduce|make|use|include|define|implement|wrap)\b"
                            r"|\b(?:function|method|class|variable|parameter|argument|import|loop|feature|code|program|script|logic)s?\b")
_CLAUSES = re.compile(r"[.;!?\n]+|,\s*(?:and\s+)?|\b(?:and|then|also|plus)\s+(?=(?:please\s+)?"
                      r"(?:add|write|create|insert|make|use|fix|change|update|put|include|define|wrap)\b)")
_POLITE = re.compile(r"(?:please|thanks?|thank you|ok|okay)?")
_NAME = r"[`'\"]?(?P<{}>[A-Za-z_][A-Za-z0-9_]*{})[`'\"]?"
_KIND = r"(?:(?:the|a)\s+)?(?:local\s+|global\s+)?(?:variable|parameter|argument|function|method|class|constant|name)?\s*"
_NOT_NAMES = {"variable", "variables", "parameter", "parameters", "argument", "arguments", "function", "functions",
              "method", "methods", "class", "classes", "constant", "constants", "name", "names", "it", "this",
              "that", "them", "these", "those", "everything", "all"}
_RENAME = re.compile(
    r"\s*(?:please\s+)?rename\s+" + _KIND + _NAME.format("old", "")
    + r"(?:\s+(?:in|inside|within|of)\s+(?:the\s+)?(?:function|method|class)?\s*" + _NAME.format("scope", r"(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
    + r"(?:\(\))?)?\s+(?:to|as)\s+" + _NAME.format("new", "") + r"\s*[.!]?\s*", re.IGNORECASE)


def preserving(instruction: str) -> str | None:
    """"annotations" when the instruction asks only for type hints (docstrings and comments may come with
    them), "documentation" when it asks only for docstrings or comments, None otherwise."""
    kinds: set[str] = set()
    for clause in _CLAUSES.split(instruction.lower()):
        clause = clause.strip()
        if _POLITE.fullmatch(clause):
            continue
        asks = {kind for kind, pattern in (("annotations", _ANNOTATIONS), ("documentation", _DOCUMENTATION))
                if pattern.search(clause)}
        if _CODE_CHANGE.search(clause) or (not asks and _CODE_ADDITION.search(clause)):
            return None
        kinds |= asks
    if "annotations" in kinds:
        return "annotations"
    return "documentation" if kinds else None


def renaming(instruction: str) -> tuple[str, str, str | None] | None:
    """(old name, new name, the qualified name of the function or class to rename in, or None) when the
    whole instruction asks for one rename ("Rename the local variable `x` in `parse` to `y`."), else None."""
    match = _RENAME.fullmatch(instruction)
    if match is None or match["old"] == match["new"] or match["old"].lower() in _NOT_NAMES:
        return None
    return match["old"], match["new"], match["scope"]
