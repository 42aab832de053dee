"""The `preserve` task: standard-library modules as documents, and CPython's own tests run against a
rewrite of one in the sandbox, where the rewrite, and never the original, is what the tests see."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys

import pytest

from assistant.bench import preserve, sandbox

# For each module of the development set, a small change that its own tests catch: when the tests run
# against the original instead of the rewrite, it goes unnoticed.
MUTATIONS = {
    "textwrap": ("def dedent(text):\n", "def dedent(text):\n    return text\n"),
    "getopt": ("def getopt(args, shortopts, longopts = []):\n",
               "def getopt(args, shortopts, longopts = []):\n    return [], args\n"),
    "quopri": ("ESCAPE = b'='", "ESCAPE = b'~'"),
    "netrc": ("self.pushback.append(token)", "pass"),
    "linecache": ("def getline(filename, lineno, module_globals=None):\n",
                  "def getline(filename, lineno, module_globals=None):\n    return ''\n"),
    "filecmp": ("def cmp(f1, f2, shallow=True):\n", "def cmp(f1, f2, shallow=True):\n    return True\n"),
    "codeop": ('def compile_command(source, filename="<input>", symbol="single"):\n',
               'def compile_command(source, filename="<input>", symbol="single"):\n    return None\n'),
    "timeit": ("def reindent(src, indent):\n", "def reindent(src, indent):\n    return src\n"),
    "string": ("def capwords(s, sep=None):\n", "def capwords(s, sep=None):\n    return s\n"),
    "copy": ("def deepcopy(x, memo=None, _nil=[]):\n", "def deepcopy(x, memo=None, _nil=[]):\n    return x\n"),
}
# Hands the interpreter the original module in place of itself: the rewrite imports, but is not what runs.
HANDS_OVER_THE_ORIGINAL = """\
import importlib.machinery, importlib.util, sys
_spec = importlib.machinery.PathFinder.find_spec(__name__)
_original = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_original)
sys.modules[__name__] = _original
"""


def mutated(module: str) -> str:
    old, new = MUTATIONS[module]
    source = preserve.module_source(module)
    assert source.count(old) == 1, f"the mutation of {module} no longer matches its source"
    return source.replace(old, new)


@pytest.fixture(params=["namespace", "guard"])
def network(request, monkeypatch):
    """Both ways the sandbox keeps the network away; without a namespace, more modules are loaded before the program."""
    if request.param == "namespace" and not sandbox.network_namespace():
        pytest.skip("unshare -n is not allowed here")
    monkeypatch.setattr(sandbox, "network_namespace", lambda: request.param == "namespace")


def test_records_are_every_module_with_every_instruction():
    records = preserve.records()
    assert len(records) == len(preserve.MODULES) * len(preserve.DEFAULT_INSTRUCTIONS)
    assert len({r.id for r in records}) == len(records)
    first = records[0]
    assert (first.id, first.module) == ("preserve-textwrap-type-hints", "textwrap")
    assert first.test_module == "test.test_textwrap"
    assert first.instruction == preserve.INSTRUCTIONS["type-hints"]
    with open(importlib.util.find_spec("textwrap").origin, encoding="utf-8") as file:
        assert first.source == file.read()


@pytest.mark.parametrize("module", preserve.MODULES)
def test_the_rename_instruction_names_a_local_variable_of_the_module(module):
    source = preserve.module_source(module)
    instruction = preserve.rename_instruction(source)
    assert instruction == preserve.rename_instruction(source)
    asked = re.fullmatch(r"Rename the local variable `(\w+)` in `([\w.]+)` to `(\w+)`\.", instruction)
    old, function, new = asked.groups()
    definitions = dict(preserve.functions(ast.parse(source).body))
    stored = {n.id for n in ast.walk(definitions[function]) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    assert old in stored and len(old) >= 3
    assert new not in source


def test_the_rename_instruction_skips_parameters_globals_short_names_and_nested_scopes():
    source = ("def f(parameter, *args):\n"
              "    global total\n"
              "    total = ab = [square for square in parameter]\n"
              "    def inner():\n"
              "        hidden = 1\n"
              "    for item in args:\n"
              "        pass\n"
              "    item_local = 1\n")
    assert preserve.rename_instruction(source) == "Rename the local variable `item` in `f` to `item_local_`."
    assert preserve.rename_instruction("def f(x):\n    return x\n") is None


@pytest.mark.parametrize("module", preserve.MODULES)  # each in well under a second
def test_an_original_module_passes_its_own_tests(module):
    outcome = preserve.run_tests(module, preserve.module_source(module), preserve.own_tests(module))
    assert outcome == sandbox.Outcome(True, "passed")


@pytest.mark.parametrize("module", preserve.MODULES)
def test_a_broken_rewrite_fails_its_tests(module):
    outcome = preserve.run_tests(module, mutated(module), f"test.test_{module}")
    assert not outcome.passed
    # A test failed (the rewrite was tested), rather than the program stopping before any test ran.
    assert f"the first: test.test_{module}." in outcome.reason


@pytest.mark.parametrize("module", ["string", "linecache", "copy"])  # imported by unittest and test.support too
def test_the_rewrite_shadows_a_module_loaded_before_the_tests(module, network):
    outcome = preserve.run_tests(module, mutated(module), f"test.test_{module}")
    assert not outcome.passed and f"test.test_{module}." in outcome.reason


def test_a_rewrite_that_raises_on_import_fails():
    rewrite = preserve.module_source("textwrap") + "\nraise RuntimeError('broken rewrite')\n"
    outcome = preserve.run_tests("textwrap", rewrite, "test.test_textwrap")
    assert not outcome.passed
    assert "the rewritten textwrap fails to import: RuntimeError: broken rewrite" in outcome.reason


def test_a_rewrite_that_is_not_what_runs_fails():
    outcome = preserve.run_tests("string", HANDS_OVER_THE_ORIGINAL, "test.test_string")
    assert not outcome.passed
    assert "the rewritten string is not the one imported" in outcome.reason


def test_a_module_without_its_own_tests_is_refused():
    with pytest.raises(preserve.PreserveError, match=r"no test\.test_this .*libpython3\.\d+-testsuite"):
        preserve.records(["this"])


def test_a_missing_test_package_says_how_to_get_it(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name.split(".")[0] == "test"
                        else find_spec(name, *rest))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    advice = rf"test package `test` is not installed .*apt-get install libpython{version}-testsuite"
    with pytest.raises(preserve.PreserveError, match=advice):
        preserve.records(["textwrap"])


@pytest.mark.parametrize("module, error", [("math", "not a pure-Python module"), ("sys", "not a pure-Python module"),
                                           ("json", "is a package"), ("no_such_module", "there is no module"),
                                           ("os.path", "not the name of a top-level module")])
def test_modules_without_a_python_source_of_their_own_are_refused(module, error):
    with pytest.raises(preserve.PreserveError, match=error):
        preserve.module_source(module)


def test_unknown_instructions_are_refused():
    with pytest.raises(preserve.PreserveError, match="unknown instruction 'shorten'"):
        preserve.records(instructions=["shorten"])
