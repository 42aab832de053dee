"""Whether an edit that should only document code in a language other than Python changed its code.

For an instruction that asks only for comments or documentation (see `instructions.preserving`),
the tokens of the program outside comments must stay the same. Both texts are parsed with
tree-sitter and their leaves compared with every comment node left out; the stretch from the
first to the last differing token is reported once, named after the declaration it starts in
("the edit changed code in `parse`"). Type-annotation edits are not compared in these languages:
their annotations are part of the grammar, and telling them from code needs per-language rules
that this check does not have, so for them only syntax errors are checked.
"""

from __future__ import annotations

from tree_sitter import Node, Tree

from assistant.checks.positions import encode, str_offset
from assistant.checks.report import Check, Problem
from assistant.checks.syntax import GrammarError, parse

NAMED = ("function", "method", "class", "struct", "interface", "enum", "trait", "module", "namespace",
         "constructor", "object", "declaration", "declarator")
NAME_NODES = {"identifier", "field_identifier", "type_identifier", "qualified_identifier", "destructor_name",
              "operator_name", "simple_identifier", "constant"}


def code_leaves(tree: Tree) -> list[Node]:
    """The leaves of a tree outside comments, in document order."""
    leaves: list[Node] = []
    pending = [tree.root_node]
    while pending:
        node = pending.pop()
        if "comment" in node.type:
            continue
        if node.child_count == 0:
            leaves.append(node)
        else:
            pending.extend(reversed(node.children))
    return leaves


def declared_name(node: Node | None) -> str | None:
    """The name of the nearest enclosing function, class or similar declaration of a node."""
    while node is not None:
        name = _name_of(node) if any(word in node.type for word in NAMED) else None
        if name:
            return name
        node = node.parent
    return None


def _name_of(node: Node) -> str | None:
    """The name a declaration declares: its `name` field, or the identifier its declarators nest (C, C++)."""
    part = node
    for _ in range(6):
        name = part.child_by_field_name("name")
        if name is not None:
            return (name.text or b"").decode("utf-8", "replace")
        declarator = part.child_by_field_name("declarator")
        if declarator is None:
            return None
        if declarator.type in NAME_NODES:
            return (declarator.text or b"").decode("utf-8", "replace")
        part = declarator
    return None


def _differing(old: list[bytes], new: list[bytes]) -> tuple[int, int, int] | None:
    """The first differing index of two sequences, and where their common tail starts in each; None if equal."""
    first, shortest = 0, min(len(old), len(new))
    while first < shortest and old[first] == new[first]:
        first += 1
    if first == len(old) == len(new):
        return None
    last_old, last_new = len(old), len(new)
    while last_old > first and last_new > first and old[last_old - 1] == new[last_new - 1]:
        last_old, last_new = last_old - 1, last_new - 1
    return first, last_old, last_new


def check_comments(before: str, after: str, language: str) -> Check:
    """The code that a documenting edit of a tree-sitter language changed, as at most one Problem."""
    old_data, new_data = encode(before), encode(after)
    try:
        old, new = code_leaves(parse(language, old_data)), code_leaves(parse(language, new_data))
    except GrammarError as error:
        return Check(notes=(str(error),))
    found = _differing([leaf.type.encode() + b"\0" + (leaf.text or b"") for leaf in old],
                       [leaf.type.encode() + b"\0" + (leaf.text or b"") for leaf in new])
    if found is None:
        return Check(ran=("structure",))
    first, last_old, last_new = found
    at = new[first].start_byte if first < len(new) else len(new_data)
    end = new[last_new - 1].end_byte if last_new > first else at
    name = declared_name(new[first] if first < len(new) else old[first] if first < len(old) else None)
    verb = "removed code" if last_new == first else "added code" if last_old == first else "changed code"
    message = f"the edit {verb} {'from' if last_new == first else 'in'} `{name}`" if name else f"the edit {verb}"
    problem = Problem(message, str_offset(new_data, at), str_offset(new_data, end), "changed-code", "structure")
    return Check((problem,), ("structure",))
