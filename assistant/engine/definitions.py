"""Edits that apply across a Python file, made definition by definition.

Asked of a whole standard-library module to "Add a docstring to every function that lacks one.", the
1.5B model gave the module back unchanged 8 times in 8: one pass over a long text mostly
copies it. So an instruction that asks each definition for a docstring or type hints (`asked`), of a
region of Python that parses and holds at least two definitions, is carried out with one selection
pass per definition (`plan`): each function and method, and each class's header (its lines before its
first method) when classes are asked too. Every pass's prompt shows the whole file, read-only, before
the definition and the instruction (`prompts.definition_prompt`), so all passes share that prefix and
the prefix cache prefills the file once. Definitions that already have what was asked are skipped. A
pass ends where its answer copies the function's body after the docstring, which then follows as it stands
(`body`, `selection.Rest`): the model writes the docstring or the signature, and copies the body no further.

The passes stream as one answer to the region (`long_documents.stitched`), the text between the
definitions kept verbatim. A pass's answer is shown only once it is judged (`grade`): it finished, and in
place of its definition the file still parses with the same definitions; otherwise the definition stays
as it was, and the Result's `definitions` names it as failed. A pass that left its definition without
all that was asked, or changed its code, is followed by one more with a sharper instruction that names
the definition and, for type hints, the parameters to annotate (`Part.sharper`); the better graded of
the two stands (`attempts`). Asked for type hints, a special method left without a return hint gets the one
the data model fixes without a model (` -> None` on `__init__`, ` -> str` on `__str__`, and so on: Python
raises TypeError for any other, and the 1.5B left them out), and a default value it added or changed beside a
hint is put back (`completed`). Nothing else
changes: each pass is an ordinary generation (the engine decodes several side by side, `decoding.lockstep`, which
makes each the tokens it makes alone), a cancel ends the whole answer, and the answer is checked and repaired as a
whole.

Conservative by design: comments, the module's own docstring, an instruction that names one of the
region's definitions, or one that asks to change what exists ("improve the docstrings") get the single
pass they got before, and so does a file that does not parse.
"""

from __future__ import annotations

import ast
import io
import re
import threading
import tokenize
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass, replace
from functools import partial

from assistant.checks.asked import ANNOTATIONS, DOCSTRING, complete, gives_value, has, none_but_returns, unannotated
from assistant.checks.instructions import preserving
from assistant.checks.positions import LineIndex
from assistant.checks.report import Fix, applied
from assistant.checks.restore import restored_defaults
from assistant.checks.structure import bound_names, check_structure
from assistant.engine.events import Definitions, Delta, Event, Result
from assistant.engine.long_documents import Piece, combined, stitched
from assistant.engine.output import merge_spans
from assistant.engine.repair import respliced

_DOCSTRINGS = re.compile(r"\bdoc[- ]?strings?\b|\bdocument(?:s|ed|ing)?\b|\bdocumentation\b")
_EACH = re.compile(r"\b(?:every|each|all|any|everywhere|throughout|missing|lack\w*|without)\b"
                   r"|\b(?:doc[- ]?strings|hints|annotations|functions|methods|classes|signatures)\b")
_EXISTING = re.compile(r"\b(?:improv|shorten|clarif|reword|expand|tid|clean|polish|translat|correct|updat|edit|revis"
                       r"|rephras|proofread|spell|grammar|typo|better|consisten|standardi|format|existing|current)\w*")
_MODULE = re.compile(r"\b(?:module|file|package)(?:[- ]level)?\s+doc|\bdoc\w*\s+(?:to|for|of|on|at)\s+(?:the\s+|this\s+)?"
                     r"(?:module|file|package|top)\b")
_CLASSES = re.compile(r"\bclass(?:es)?\b")
_FUNCTIONS = re.compile(r"\b(?:functions?|methods?|def)\b")
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
BLOCKS = (ast.If, ast.Try, ast.TryStar, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)
FAILED, CHANGED_CODE, PARTLY, DONE = range(4)  # how a pass did its definition's edit (`grade`)
# New tokens a docstring pass gets beyond a rewrite of its definition (twice its tokens and some): a docstring is
# new text, and the 1.5B's for a short function with four parameters ran past a two-line function's budget.
DOCSTRING_ROOM = 256
# The return type of each special method whose type the data model fixes: Python raises TypeError when one returns
# anything else (`completed`).
RETURNS = {"__init__": "None", "__str__": "str", "__repr__": "str", "__format__": "str", "__bytes__": "bytes",
           "__len__": "int", "__hash__": "int", "__index__": "int", "__int__": "int",
           "__float__": "float", "__complex__": "complex", "__bool__": "bool"}


@dataclass(frozen=True)
class Part:
    """A definition to rewrite alone: its qualified name and its document range, from the start of its first
    line (indentation and decorators included) to the end of its last non-blank character."""

    name: str
    span: Piece
    sharper: str = ""  # the instruction of a second pass, for a definition its pass left without what was asked
    rest: Piece | None = None  # its body after the docstring, which a pass that copies it takes as it stands (`body`)


@dataclass(frozen=True)
class Plan:
    """The definitions of a region to rewrite one pass each, in order, and those skipped (already done); what
    each is asked (`asked`'s answer) and the instruction's kind (`preserving`)."""

    parts: tuple[Part, ...]
    skipped: tuple[str, ...]
    wanted: frozenset[str] = frozenset({DOCSTRING})
    classes: bool = False
    kind: str = "documentation"

    @property
    def room(self) -> int:
        """New tokens each pass gets beyond the budget of a rewrite of its definition."""
        return DOCSTRING_ROOM if DOCSTRING in self.wanted else 0


def asked(instruction: str) -> tuple[frozenset[str], bool] | None:
    """What an instruction asks of each definition (DOCSTRING, ANNOTATIONS) and whether classes are asked too,
    or None unless it asks only to add docstrings or type hints across a text (every, each, all, plurals)."""
    kind, said = preserving(instruction), instruction.lower()
    wanted = frozenset({DOCSTRING} if _DOCSTRINGS.search(said) else ()) | (
        frozenset({ANNOTATIONS}) if kind == "annotations" else frozenset())
    if kind is None or not wanted or not _EACH.search(said) or _EXISTING.search(said) or _MODULE.search(said):
        return None
    classes = DOCSTRING in wanted and (bool(_CLASSES.search(said)) or not _FUNCTIONS.search(said))
    return wanted, classes


def plan(document: str, region: Piece, instruction: str, language: str | None) -> Plan | None:
    """The definitions of `region` to rewrite one pass each, or None where the edit is not made that way: the
    instruction does not qualify (`asked`), the language is not Python, the document does not parse, a
    definition straddles the region's edge or the region holds fewer than two definitions."""
    wants = asked(instruction) if language == "python" else None
    tree = parsed(document) if wants is not None else None
    if tree is None:
        return None
    wanted, classes = wants
    index = LineIndex(document)
    found = list(units(tree.body, index, classes))
    inside = [(part, node) for part, node in found if region[0] <= part.span[0] and part.span[1] <= region[1]]
    touching = [part for part, _ in found if part.span[0] < region[1] and region[0] < part.span[1]]
    if len(touching) > len(inside) or len(inside) < 2 or names_one(instruction, tree, index, region):
        return None
    done = [finished(node, wanted) for _, node in inside]
    return Plan(tuple(replace(part, sharper=sharper(part.name, node, wanted), rest=body(node, index, part.span))
                      for (part, node), skip in zip(inside, done) if not skip),
                tuple(part.name for (part, _), skip in zip(inside, done) if skip), wanted, classes,
                preserving(instruction))


def finished(node: ast.AST, wanted: frozenset[str]) -> bool:
    """Whether a part's definition has what was asked: a class header itself, a function with all it nests."""
    return has(node, wanted) if isinstance(node, ast.ClassDef) else complete(node, wanted)


def sharper(name: str, node: ast.AST, wanted: frozenset[str]) -> str:
    """The instruction of a second pass over a definition that its first pass left without what was asked: the
    definition by name, the functions and classes it defines that lack it and, for type hints, the parameters to
    annotate."""
    hints = ANNOTATIONS in wanted and not isinstance(node, ast.ClassDef)
    things = ["a docstring"] * (DOCSTRING in wanted) + ["type hints"] * hints
    nested = [] if isinstance(node, ast.ClassDef) else [
        f"`{inner.name}`" for inner in ast.walk(node)
        if inner is not node and isinstance(inner, DEFINITIONS) and not has(inner, wanted)]
    inside = f" and to what it defines, {joined(nested)}" if nested else ""
    said = f"Add {' and '.join(things)} to `{name}`{inside}."
    if hints:
        bare = [f"`{name}`" for name in unannotated(node)]
        if node.returns is None:
            bare.append("its return type (it returns a value: not `-> None`)" if gives_value(node)
                        else "its return type (`-> None`: it returns nothing)")
        said += f" Annotate {joined(bare)}." if bare else ""
    return said + " Keep its code as it is."


def joined(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def body(node: ast.AST, index: LineIndex, span: Piece) -> Piece | None:
    """The range of a function's body after its docstring, from the start of its line to the end of `span`, where
    it starts on a line of its own and holds no definition (a nested one may be asked for a docstring or hints)."""
    if isinstance(node, ast.ClassDef):
        return None
    statements = node.body[1:] if ast.get_docstring(node, clean=False) is not None else node.body
    if not statements or any(isinstance(inner, DEFINITIONS) for statement in statements for inner in ast.walk(statement)):
        return None
    first = statements[0]
    alone = first.lineno > node.lineno and not index.line(first.lineno - 1)[:first.col_offset].strip()
    return (index.starts[first.lineno - 1], span[1]) if alone else None


def names_one(instruction: str, tree: ast.Module, index: LineIndex, region: Piece) -> bool:
    """Whether the instruction names a definition that starts in `region` (it may be about that one alone)."""
    named = {node.name for node in ast.walk(tree)
             if isinstance(node, DEFINITIONS) and region[0] <= index.starts[node.lineno - 1] < region[1]}
    return any(re.search(rf"(?<![\w.]){re.escape(name)}\b", instruction) for name in named)


def parsed(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def units(body: list[ast.stmt], index: LineIndex, classes: bool, prefix: str = "") -> Iterator[tuple[Part, ast.AST]]:
    """The parts of a module's or class's body, in order: each function; each class's header when `classes`
    (the whole class when it has no definitions inside); the parts of each class's body; the parts of the
    blocks (`if`, `try`, `with`, loops) in the body."""
    for node in body:
        if isinstance(node, BLOCKS):  # definitions made under an `if`, a `try`, a `with` or a loop
            handlers = [statement for handler in getattr(node, "handlers", ()) for statement in handler.body]
            inside = node.body + handlers + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
            yield from units(inside, index, classes, prefix)
        if not isinstance(node, DEFINITIONS):
            continue
        start = index.starts[min(d.lineno for d in [node, *node.decorator_list]) - 1]
        name = prefix + node.name
        inner = [n for n in node.body if isinstance(n, DEFINITIONS)] if isinstance(node, ast.ClassDef) else []
        if not inner:
            if classes or not isinstance(node, ast.ClassDef):
                yield Part(name, (start, line_end(index, node.end_lineno))), node
            continue
        if classes:
            first = min(d.lineno for d in [inner[0], *inner[0].decorator_list])
            yield Part(name, (start, last_text(index, node.lineno, first - 1))), node
        yield from units(node.body, index, classes, name + ".")


def line_end(index: LineIndex, row: int) -> int:
    """The offset of the end of a 1-based row's text (before its line break)."""
    return index.starts[row - 1] + len(index.line(row - 1))


def last_text(index: LineIndex, first: int, last: int) -> int:
    """The end of the last non-blank row from `first` to `last` (1-based, inclusive; `first` is not blank)."""
    while last > first and not index.line(last - 1).strip():
        last -= 1
    return line_end(index, last)


def grade(document: str, definitions: list[str], part: Piece, result: Result, planned: Plan) -> int:
    """How a pass's answer did its definition's edit: FAILED unless it finished and, in its place, the document
    still parses with the same `definitions` (the document's, by qualified name, in order); CHANGED_CODE where
    it changed code (`check_structure`); DONE where the definition has all that was asked, and no `-> None` on a
    function that returns a value (`none_but_returns`); PARTLY otherwise."""
    after = document[:part[0]] + result.text + document[part[1]:]
    tree = parsed(after) if result.finished else None
    if tree is None or qualified_names(tree) != definitions:
        return FAILED
    if check_structure(document, after, planned.kind).problems:
        return CHANGED_CODE
    made = [node for found, node in units(tree.body, LineIndex(after), planned.classes) if found.span[0] == part[0]]
    if not made or not finished(made[0], planned.wanted):
        return PARTLY
    functions = [node for node in ast.walk(made[0]) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return PARTLY if ANNOTATIONS in planned.wanted and any(map(none_but_returns, functions)) else DONE


def qualified_names(tree: ast.AST, prefix: str = "") -> list[str]:
    """Every definition's qualified name, at any depth, in order."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, DEFINITIONS):
            found += [prefix + node.name, *qualified_names(node, prefix + node.name + ".")]
        else:
            found += qualified_names(node, prefix)
    return found


def rewrite(document: str, region: Piece, planned: Plan, one_pass: Callable[[Part, str | None], Iterator[Event]],
            cancel: threading.Event | None, names: tuple[str, str]) -> Iterator[Event]:
    """The answer to the region, each planned definition rewritten by `one_pass` (with the request's instruction:
    None; started as it is reached), and once more with its `sharper` instruction where that pass did not do
    all that was asked (`attempts`); the Result's `definitions` says which were edited, left unchanged, failed
    or skipped, and which had a second pass. An answer that edited none while a pass was cut at the token limit stopped on that limit, as a
    single pass would have: it is unfinished, and a door says which limit to raise. `names`: the model and
    weights, for a Result with no pass."""
    by_span = {part.span: part.name for part in planned.parts}
    before = qualified_names(parsed(document))
    outcome: dict[str, list[str]] = {"edited": [], "unchanged": [], "failed": [], "retried": [], "sharpened": []}
    cut = []  # the passes stopped at the token limit

    def graded(part: Piece, result: Result) -> int:
        return grade(document, before, part, result, planned)

    def take(part: Piece, result: Result) -> bool:
        kept = graded(part, result) > FAILED
        same = result.text == document[part[0]:part[1]]
        outcome["failed" if not kept else "unchanged" if same else "edited"].append(by_span[part])
        cut.extend([part] if result.stopped == "length" else [])
        return kept

    hinted = partial(completed, document) if ANNOTATIONS in planned.wanted else None
    passes = ((part.span, attempts(part, one_pass, graded, cancel, outcome, hinted and partial(hinted, part.span)))
              for part in planned.parts)
    for event in stitched(document, region, passes, cancel, [p.span for p in planned.parts], take, names):
        if isinstance(event, Result):
            made = Definitions(skipped=planned.skipped, **{key: tuple(found) for key, found in outcome.items()})
            event = replace(event, definitions=made)
            if cut and not outcome["edited"] and event.finished:  # nothing made, for want of tokens: unfinished
                event = replace(event, stopped="length")
        yield event


def attempts(part: Part, one_pass: Callable[[Part, str | None], Iterator[Event]],
             graded: Callable[[Piece, Result], int], cancel: threading.Event | None,
             outcome: dict[str, list[str]], hinted: Callable[[list[Delta], Result], tuple] | None = None
             ) -> Iterator[Event]:
    """The events of `part`'s pass or, where that pass finished short of DONE, of a second pass with the part's
    sharper instruction when it grades higher (noted in `outcome`'s "retried" and "sharpened"); the Deltas come
    once the pass is chosen (the events that are neither as they come), and the Result's stats count both
    passes. A second pass that is cut or cancelled is never chosen. `hinted` completes each finished pass's
    answer before it is graded (`completed`)."""
    deltas, result = yield from held(one_pass(part, None), hinted)
    if result is None or not result.finished or (cancel is not None and cancel.is_set()):
        yield from deltas + ([result] if result is not None else [])
        return
    first = graded(part.span, result)
    if first < DONE:
        outcome["retried"].append(part.name)
        more, second = yield from held(one_pass(part, part.sharper), hinted)
        stats = combined([result.stats] + ([second.stats] if second is not None else []))
        if second is not None and second.finished and graded(part.span, second) > first:
            deltas, result = more, second
            outcome["sharpened"].append(part.name)
        result = replace(result, stats=stats)
    yield from deltas + [result]


def held(events: Iterator[Event], hinted: Callable[[list[Delta], Result], tuple] | None = None
         ) -> Generator[Event, None, tuple[list[Event], Result | None]]:
    """Run a pass, giving its events other than Deltas and its Result as they come: its Deltas and Result,
    completed by `hinted` where it finished (as they were, should `hinted` fail)."""
    deltas, result = [], None
    with closing(events):
        for event in events:
            if isinstance(event, Delta):
                deltas.append(event)
            elif isinstance(event, Result):
                result = event
            else:
                yield event
    if hinted is None or result is None or not result.finished:
        return deltas, result
    try:
        return hinted(deltas, result)
    except Exception:  # noqa: BLE001 - as a check, a completion without a model must never stop an answer's delivery
        return deltas, result


def completed(document: str, part: Piece, deltas: list[Delta], result: Result) -> tuple[list[Delta], Result]:
    """A type-hint pass's answer completed without a model, before it is graded: the return hint of `RETURNS`
    written on each special method it left without one (` -> None` on `__init__`, ` -> str` on `__str__`: the
    data model fixes them, and the 1.5B left them out), and the default values it added, changed or removed put
    back as they were (`checks.restored_defaults`: it wrote `dir_fd: int = None`; the hint stays). Its Deltas
    are merged into one whose spans make room for that: new words unattributed, a default put back attributed
    to the document. The answer as it was where there is nothing to do or it does not parse in place."""
    start, after = part[0], document[:part[0]] + result.text + document[part[1]:]
    found = sorted(_dunder_fixes(after) + restored_defaults(document, after))
    fixes = [fix._replace(start=fix.start - start, end=fix.end - start) for fix in found
             if start <= fix.start and fix.end <= start + len(result.text)]
    if not fixes or not deltas:
        return deltas, result
    text, tokens = applied(result.text, fixes), respliced([span for delta in deltas for span in delta.tokens], fixes)
    merged = Delta(text, tokens, sum(d.new_tokens for d in deltas), sum(d.drafted for d in deltas),
                   sum(d.accepted for d in deltas), sum(d.seconds for d in deltas), deltas[-1].totals)
    return [merged], replace(result, text=text, spans=merge_spans(tokens), token_spans=tokens)


def _dunder_fixes(text: str) -> list[Fix]:
    """The insertion of the return hint of `RETURNS` after the parameters of each special method of `text` that
    has none, unless the file rebinds the type's name."""
    tree, index = parsed(text), LineIndex(text)
    rebound = bound_names(tree)
    starts = [(index.offset_utf8(node.lineno - 1, node.col_offset), f" -> {RETURNS[node.name]}")
              for node in ast.walk(tree or ast.Module([], [])) if isinstance(node, ast.FunctionDef)
              and node.returns is None and node.name in RETURNS and RETURNS[node.name] not in rebound]
    ends = ((parameters_end(text, at), words) for at, words in starts)
    return [Fix(end, end, words, None) for end, words in ends if end is not None]


def parameters_end(text: str, start: int) -> int | None:
    """The offset just after the `)` that closes the parameters of the `def` at `start` in `text`."""
    depth, lines = 0, LineIndex(text[start:])
    try:
        for token in tokenize.generate_tokens(io.StringIO(text[start:]).readline):
            if token.type == tokenize.OP and token.string in "([{)]}":
                depth += 1 if token.string in "([{" else -1
                if depth == 0:
                    return start + lines.offset(token.end[0] - 1, token.end[1])
    except (tokenize.TokenError, SyntaxError):
        pass
    return None
