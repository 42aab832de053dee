"""The import rule of docs/architecture.md, read from the source: imports go one way, with no cycle
(type-only ones included) and no project import inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "assistant"
# What each part may import of the project, besides itself (the layers of docs/architecture.md).
BASE = {"assistant", "assistant.config", "assistant.files", "assistant.errors"}
ALLOWED = {
    "kernels": BASE,
    "checks": BASE,
    "model": BASE | {"assistant.kernels"},
    "decoding": BASE | {"assistant.model", "assistant.kernels"},
    "engine": BASE | {"assistant.decoding", "assistant.model", "assistant.kernels", "assistant.checks"},
}
DOORS = ("lsp", "web", "serve")
TOOLS = ("bench",)
# The engine's public API, what a door may import of the project besides its own package and the HTTP plumbing
# the two HTTP doors share: the facade (the contract, the events, the engines), the asyncio view, the checks.
PUBLIC = BASE | {"assistant.errors", "assistant.engine.aio", "assistant.checks", "assistant.http"}
# The facade, the remote client and what they import: a door with --engine loads them, and no torch (test_light_client.py).
LIGHT = ("assistant", "assistant.engine.contract", "assistant.engine.remote", "assistant.engine.aio")
HEAVY = ("assistant.decoding", "assistant.model", "assistant.kernels", "assistant.engine.assistant")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports(path: Path) -> list[tuple[str, bool]]:
    """(project module imported, whether the import sits inside a function) for every import of `path`."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom) and child.module and child.module.startswith("assistant"):
                for alias in child.names:
                    full = f"{child.module}.{alias.name}"
                    found.append((full if full in MODULES else child.module, inside))
            elif isinstance(child, ast.Import):
                found.extend((alias.name, inside) for alias in child.names if alias.name.startswith("assistant"))
            visit(child, inside)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def part(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else ""


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_project_import_inside_a_function(module):
    assert [name for name, inside in imports(MODULES[module]) if inside] == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if part(m) in ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(module):
    allowed = ALLOWED[part(module)] | {f"assistant.{part(module)}"}
    for name, _ in imports(MODULES[module]):
        assert any(name == prefix or name.startswith(prefix + ".") for prefix in allowed), f"{module} imports {name}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if part(m) in DOORS + TOOLS))
def test_doors_and_tools_import_neither_each_other_nor_the_command(module):
    others = {f"assistant.{name}" for name in DOORS + TOOLS + ("cli",)} - {f"assistant.{part(module)}"}
    for name, _ in imports(MODULES[module]):
        assert not any(name == other or name.startswith(other + ".") for other in others), f"{module} imports {name}"


def test_there_is_no_import_cycle():
    graph = {module: {name for name, _ in imports(path) if name in MODULES and name != module}
             for module, path in MODULES.items()}
    graph = {module: {n for n in names if n != "assistant"} for module, names in graph.items()}  # the facade
    done, path = set(), []

    def visit(module: str) -> None:
        if module in path:
            pytest.fail("import cycle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        path.append(module)
        for name in sorted(graph[module]):
            visit(name)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


def within(name: str, prefixes) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if part(m) in DOORS + ("http",)))
def test_doors_import_only_the_public_api(module):
    allowed = PUBLIC | {f"assistant.{part(module)}"}
    for name, _ in imports(MODULES[module]):
        assert within(name, allowed), f"{module} imports {name}, past the engine's public API"


def test_the_remote_client_imports_nothing_that_loads_the_model():
    seen, todo = set(), list(LIGHT)
    while todo:
        module = todo.pop()
        if module in seen or module not in MODULES:
            continue
        seen.add(module)
        todo += [name for name, _ in imports(MODULES[module]) if name != "assistant"]
    assert sorted(m for m in seen if within(m, HEAVY)) == []


# What the command may import of the project besides its own package: the doors, the tools, the public API,
# the model names and weight formats its options offer, and the tuned settings `assistant calibrate` writes.
COMMAND = PUBLIC | {f"assistant.{name}" for name in DOORS + TOOLS} | {"assistant.model.catalog", "assistant.model.tuning"}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if part(m) == "cli"))
def test_the_command_imports_the_doors_the_tools_and_the_public_api(module):
    for name, _ in imports(MODULES[module]):
        assert within(name, COMMAND | {"assistant.cli"}), f"{module} imports {name}"
