"""Undefined names in the type hints an edit added that need no model to fix: missing `typing` and
`types` imports and unquoted forward references.

Asked for type hints, a 1.5B model writes `Tuple[float, float]` or `typing.Optional[str]` and no
import, or `def copy(self) -> Box:` inside `class Box`, evaluated before `Box` exists; either way
the module fails at import with a NameError (ruff's F821). Neither fix is a guess:
- a name that is `typing` itself or one `typing` exports gets its import, `import typing` or one
  `from typing import ...` for the names, on lines of their own before the module's first statement
  that is neither its docstring nor a `from __future__` import; so does a class that `types` exports
  and `typing` does not (`-> CodeType`: `from types import CodeType`), and so does a standard-library
  module an annotation names an attribute of (`stream: io.TextIOWrapper`: `import io`), where the module
  has every attribute named;
- an annotation that names, as an attribute of a standard-library module, a name the module lacks and
  `typing` exports is spelt with `typing` (`io.TextIO`: `typing.TextIO`, with `import typing`): `typing`
  is where such names live, and `io.TextIO` fails at import (an AttributeError, even with `io` imported);
- a name in an annotation that the module defines as a class or at its own level, later than the
  annotation is evaluated, is quoted where it stands (`-> "Box"`), a forward reference as PEP 484
  spells it, which changes nothing at run time;
- a name in an annotation that is, but for its case, a name `typing` exports is spelt as `typing` does, and
  imported (`key: hashable`: `Hashable`): undefined, it fails at import, and no other reading is near.
An annotation that names anything else undefined is removed (`x: Token` becomes `x`): a hint to a type that
is nowhere cannot be made right without a guess, and it makes the module fail at import. An undefined name
outside annotations is the model's to repair.
"""

from __future__ import annotations

import ast
import sys
import types
import typing

from assistant.checks.lint import check_python
from assistant.checks.positions import LineIndex
from assistant.checks.rename import module_names
from assistant.checks.report import Fix, Problem
from assistant.checks.structure import TYPING_MODULES, annotation_nodes, annotation_only, annotations, bound_names

TYPING_NAMES = frozenset(typing.__all__)
TYPES_NAMES = frozenset(name for name in types.__all__ if isinstance(getattr(types, name), type)) - TYPING_NAMES
TYPING_CASES = {lower: tuple(sorted(name for name in TYPING_NAMES if name.lower() == lower))  # by their lower case
                for lower in {name.lower() for name in TYPING_NAMES}}
# Classes of the standard library that `typing` does not export, by the one module each lives in: annotations name
# them bare (the 1.5B hinted `x: deque` in reprlib, which imports nothing from `collections`). Names that are also
# modules (`datetime`, `time`) are left out: which one an annotation means is a guess.
CLASSES = {"deque": "collections", "defaultdict": "collections", "Decimal": "decimal", "Fraction": "fractions",
           "Path": "pathlib", "PurePath": "pathlib", "date": "datetime", "timedelta": "datetime", "Enum": "enum",
           "partial": "functools", "UUID": "uuid", "ZoneInfo": "zoneinfo", "Thread": "threading"}


def hint_fixes(before: str, after: str) -> list[Fix]:
    """The Fixes of the names `after` uses undefined in annotations where `before` did not (ruff's F821): imports,
    respellings, quoted forward references, and the removal of the annotations that are left naming one; in
    order, and none when `after` does not parse."""
    try:
        tree = ast.parse(after)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    undefined = [problem for problem in check_python(before, after).problems if problem.code == "F821"]
    quoted = _forward_references(tree, after, undefined)
    spelt = _typing_spellings(tree, after, before)
    cased = _typing_cases(tree, after, undefined)
    fixed = {(fix.start, fix.end) for fix in quoted + spelt + cased}
    names = {after[problem.start:problem.end] for problem in undefined if (problem.start, problem.end) not in fixed}
    names |= {fix.text for fix in cased} - module_names(tree)
    names |= {"typing"} if spelt and "typing" not in module_names(tree) else set()
    imports, covered = _imports(tree, after, names)
    fixes = imports + quoted + spelt + cased
    left = [problem for problem in undefined if (problem.start, problem.end) not in fixed
            and after[problem.start:problem.end] not in covered]
    return sorted(fixes + _dropped(tree, after, left, fixes))


def _typing_spellings(tree: ast.Module, text: str, before: str) -> list[Fix]:
    """The respelling with `typing` of each module attribute in an annotation that `_typing_name` holds, where
    the module's name is not bound or is bound by `import` to the module, and `before` does not hold it."""
    imported = {alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names
                if alias.asname is None}
    bound = module_names(tree) - imported
    lines = LineIndex(text)
    fixes = []
    for node in annotation_nodes(tree):
        if _typing_name(node) and node.value.id not in bound and ast.unparse(node) not in before:
            start = lines.offset_utf8(node.lineno - 1, node.col_offset)
            fixes.append(Fix(start, start + len(node.value.id), "typing", None))
    return fixes


def _typing_cases(tree: ast.Module, text: str, undefined: list[Problem]) -> list[Fix]:
    """The respelling of each undefined name in an annotation that is, but for its case, one name `typing`
    exports and the module binds to nothing else (`hashable`: `Hashable`, which it may have imported from
    `typing` already), but a class of `CLASSES` (`deque` is imported as it is)."""
    imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                and node.module in TYPING_MODULES for alias in node.names}
    lines, bound = LineIndex(text), bound_names(tree) - imported
    values = {id(node.value) for node in annotation_nodes(tree) if isinstance(node, ast.Attribute)}
    bare = {(lines.offset_utf8(node.lineno - 1, node.col_offset), node.id) for node in annotation_nodes(tree)
            if isinstance(node, ast.Name) and id(node) not in values and node.id not in sys.stdlib_module_names}
    fixes = []
    for problem in undefined:
        name = text[problem.start:problem.end]
        matches = TYPING_CASES.get(name.lower(), ())
        wanted = len(matches) == 1 and matches[0] not in bound | {name} and name not in CLASSES
        if (problem.start, name) in bare and wanted:
            fixes.append(Fix(problem.start, problem.end, matches[0], None))
    return fixes


def _typing_name(node: ast.AST) -> bool:
    """Whether `node` names an attribute that a loaded standard-library module lacks and `typing` exports."""
    if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
        return False
    module = sys.modules.get(node.value.id) if node.value.id in sys.stdlib_module_names else None
    return module is not None and node.attr in TYPING_NAMES and not hasattr(module, node.attr)


def _imports(tree: ast.Module, text: str, names: set[str]) -> tuple[list[Fix], set[str]]:
    """The insertion of the imports of those of `names` that are `typing`, its exports, classes of `types`,
    `CLASSES` that only annotations name, or standard-library modules whose attributes an annotation names;
    and the names it imports."""
    modules = sorted(names & _annotated_modules(tree) - {"typing"})
    lines = [f"import {module}\n" for module in ["typing"] * ("typing" in names) + modules]
    covered = names & {"typing", *modules}
    bare = annotation_only(tree)
    homes = sorted({CLASSES[name] for name in names & bare & CLASSES.keys()})
    classes = [(home, {name for name, module in CLASSES.items() if module == home}) for home in homes]
    for module, exported in (("typing", TYPING_NAMES), ("types", TYPES_NAMES), *classes):
        imported = sorted(names & exported)
        lines += [f"from {module} import {', '.join(imported)}\n"] if imported else []
        covered |= set(imported)
    at = _first_statement(tree, text)
    return ([Fix(at, at, "".join(lines), None)], covered) if lines and at is not None else ([], set())


def _dropped(tree: ast.Module, text: str, undefined: list[Problem], fixes: list[Fix]) -> list[Fix]:
    """The removal of each annotation of a parameter, a return or an assignment with a value that names one of
    `undefined` and overlaps none of `fixes`: a hint to a type that is nowhere (the 1.5B wrote `-> Token` in
    shlex) fails at import, and no fix can tell what was meant."""
    lines = LineIndex(text)
    spans = set()
    for node in ast.walk(tree):
        for start, annotation in _annotated(node, lines):
            end = lines.offset_utf8(annotation.end_lineno - 1, annotation.end_col_offset)
            if any(start <= p.start and p.end <= end for p in undefined) and \
                    not any(fix.start < end and start < fix.end for fix in fixes):
                spans.add((start, end))
    return [Fix(start, end, "", None) for start, end in sorted(spans)]


def _annotated(node: ast.AST, lines: LineIndex) -> list[tuple[int, ast.expr]]:
    """The annotations of a parameter, a function's return or an assignment with a value, each with the offset
    its removal starts at: after the parameter's or target's name, or before the function's `->`."""
    text = lines.text
    if isinstance(node, ast.arg) and node.annotation is not None:
        return [(lines.offset_utf8(node.lineno - 1, node.col_offset) + len(node.arg), node.annotation)]
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [(lines.offset_utf8(node.target.end_lineno - 1, node.target.end_col_offset), node.annotation)]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
        arrow = text.rfind("->", 0, lines.offset_utf8(node.returns.lineno - 1, node.returns.col_offset))
        return [(len(text[:arrow].rstrip(" \t")), node.returns)]
    return []


def _annotated_modules(tree: ast.Module) -> set[str]:
    """The public standard-library modules that annotations name attributes of, each of which the module has
    (`io` for `io.IOBase`; not for `io.Colour`, which `io` lacks: imported, it would fail at import all the
    same), those respelt with `typing` aside. Only modules this process has loaded are looked into: a module
    is never imported to check it."""
    named: dict[str, set[str]] = {}
    for node in annotation_nodes(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and not _typing_name(node)
                and node.value.id in sys.stdlib_module_names and not node.value.id.startswith("_")):
            named.setdefault(node.value.id, set()).add(node.attr)
    return {module for module, attributes in named.items()
            if module in sys.modules and all(hasattr(sys.modules[module], name) for name in attributes)}


def _first_statement(tree: ast.Module, text: str) -> int | None:
    """The offset of the line of a module's first statement after its docstring and `__future__` imports
    (the end of the text when there is none and it ends a line); None where there is no such place."""
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    while body and isinstance(body[0], ast.ImportFrom) and body[0].module == "__future__":
        body = body[1:]
    if not body:
        return len(text) if text.endswith(("\n", "\r")) or not text else None
    first = min([body[0].lineno, *(decorator.lineno for decorator in getattr(body[0], "decorator_list", []))])
    return LineIndex(text).offset(first - 1, 0)


def _forward_references(tree: ast.Module, text: str, undefined: list[Problem]) -> list[Fix]:
    """The quoting of each undefined name that stands as a name in an annotation and is a class of the
    module or a name it binds at its own level."""
    defined = module_names(tree) | {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    lines = LineIndex(text)
    names = {}
    for annotation in annotations(tree):
        for node in ast.walk(annotation):
            if isinstance(node, ast.Name) and node.id in defined:
                start = lines.offset_utf8(node.lineno - 1, node.col_offset)
                names[start, start + len(node.id)] = node.id
    return [Fix(problem.start, problem.end, f'"{names[problem.start, problem.end]}"', None)
            for problem in undefined if (problem.start, problem.end) in names]

