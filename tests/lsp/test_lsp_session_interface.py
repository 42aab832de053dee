"""`lsp.session` takes the small interface it uses of the language server (`session.Server`), so it imports
nothing of `lsp.server`, not even for types (issue 33's type-only cycle session -> server -> session), and
the server it is handed provides every member of that interface."""

from __future__ import annotations

import ast
import inspect

from assistant.lsp import server, session


def test_the_session_does_not_import_the_server():
    tree = ast.parse(inspect.getsource(session))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "assistant.lsp.server" not in imported
    assert not any(isinstance(node, ast.ImportFrom) and node.module == "assistant.lsp"
                   and any(alias.name == "server" for alias in node.names) for node in ast.walk(tree))


def test_the_server_provides_what_a_session_uses():
    members = set(session.Server.__annotations__) | {name for name in vars(session.Server) if not name.startswith("_")}
    instance = server.AssistantServer()
    missing = {name for name in members if name not in vars(instance) and not hasattr(server.AssistantServer, name)}
    assert missing == set()
