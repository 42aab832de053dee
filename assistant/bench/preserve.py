"""The `preserve` task of the bench (`assistant bench --tasks preserve`): edits that must not change
what a program does (type hints, docstrings, f-strings, renaming a local variable), asked of real
modules that carry their own tests: pure-Python modules of CPython's standard library, whose rewrite
is checked by running CPython's own `test.test_<module>` against it. A rewrite of a whole real module
is long and mostly copied, the case prompt lookup decoding is for, and the module's own test suite
says whether the model kept its behaviour, which a similarity score cannot. The sources are read from
the interpreter that runs the bench, so they always match its test package. The tests run in the
sandbox (a separate, isolated interpreter with time and memory limits and no network), where the
rewritten module is put in front of every other way to import that name (before frozen and
built-in modules, the path and the interpreter's own earlier import of it), and the program checks
that the module and the test module's references to it are the rewritten file before running any
test, so that a rewrite that cannot be used is never scored by the original module's passing tests.

Tests that keep passing say the edit kept the behaviour, not that it made the edit: `done` says how much
of what the instruction asked the answer did (`done.py`), so that an answer that changed nothing is kept
but not done.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import done, sandbox

# The development set; reviewers hold other modules apart, so nothing here may depend on these ten.
MODULES = ("textwrap", "getopt", "quopri", "netrc", "linecache", "filecmp", "codeop", "timeit", "string", "copy")
INSTRUCTIONS = {
    "type-hints": "Add type hints to every function.",
    "docstrings": "Add a docstring to every function that lacks one.",
    "f-strings": "Use f-strings instead of % formatting.",
}
RENAME_LOCAL = "rename-local"  # an instruction of its own for each module: see `rename_instruction`
RENAME = "Rename the local variable `{old}` in `{function}` to `{new}`."
RENAMED = re.compile(r"Rename the local variable `(?P<old>\w+)` in `(?P<function>[\w.]+)` to `(?P<new>\w+)`\.\Z")
DONE = {INSTRUCTIONS["type-hints"]: done.hints_done, INSTRUCTIONS["docstrings"]: done.docstrings_done,
        INSTRUCTIONS["f-strings"]: done.fstrings_done}
DEFAULT_INSTRUCTIONS = (*INSTRUCTIONS, RENAME_LOCAL)
TIME_LIMIT_S = 120.0
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
REWRITTEN_FOLDER = "preserve-rewritten"  # in the sandbox's scratch folder


class PreserveError(ValueError):
    pass


@dataclass(frozen=True)
class PreserveRecord:
    id: str  # "preserve-textwrap-type-hints"
    module: str  # "textwrap"
    instruction: str
    source: str  # the module's source as this interpreter ships it: the document to rewrite
    test_module: str  # "test.test_textwrap"


def records(modules: tuple[str, ...] | list[str] = MODULES,
            instructions: tuple[str, ...] | list[str] = DEFAULT_INSTRUCTIONS) -> list[PreserveRecord]:
    """One record per module and instruction (named by its key in INSTRUCTIONS, or RENAME_LOCAL), in
    that order; a module with no local variable to rename has no RENAME_LOCAL record."""
    unknown = [name for name in instructions if name not in DEFAULT_INSTRUCTIONS]
    if unknown:
        raise PreserveError(f"unknown instruction {unknown[0]!r}: use one of {', '.join(DEFAULT_INSTRUCTIONS)}")
    result = []
    for module in modules:
        source, test_module = module_source(module), own_tests(module)
        for name in instructions:
            text = rename_instruction(source) if name == RENAME_LOCAL else INSTRUCTIONS[name]
            if text is not None:
                result.append(PreserveRecord(f"preserve-{module}-{name}", module, text, source, test_module))
    return result


def named(record_id: str) -> tuple[str, str] | None:
    """The module and instruction name (a key of INSTRUCTIONS, or RENAME_LOCAL) a record id names, if it names one."""
    found = re.fullmatch(rf"preserve-(\w+)-({'|'.join(map(re.escape, DEFAULT_INSTRUCTIONS))})", record_id)
    return (found[1], found[2]) if found else None


def stdlib_folder() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def module_source(module: str) -> str:
    """The source of the standard library's pure-Python module `module`, as this interpreter ships it."""
    if not NAME.match(module):
        raise PreserveError(f"{module!r} is not the name of a top-level module")
    spec = importlib.util.find_spec(module)  # a top-level name: finds it without importing anything
    if spec is None:
        raise PreserveError(f"there is no module {module!r} in {sys.executable}")
    if spec.submodule_search_locations is not None:
        raise PreserveError(f"{module!r} is a package: the preserve task takes single-file modules")
    # Modules frozen into the interpreter (os, posixpath, ...) keep the path of their source file here.
    origin = getattr(spec.loader_state, "filename", None) if spec.origin == "frozen" else spec.origin
    if not origin or not origin.endswith(".py"):
        raise PreserveError(f"{module!r} is not a pure-Python module (it is {spec.origin or 'built in'}): "
                            "built-in and C extension modules have no Python source to rewrite")
    path = Path(origin).resolve()
    if path.parent != stdlib_folder():
        raise PreserveError(f"{module!r} is not a module of the standard library in {stdlib_folder()} (found {path})")
    return path.read_text(encoding="utf-8")


def own_tests(module: str) -> str:
    """`test.test_<module>`, once it is known to be there: Debian splits CPython's tests into a package
    of their own, which pyenv and python.org builds include."""
    name = f"test.test_{module}"
    get = (f"on Debian or Ubuntu, `apt-get install libpython{sys.version_info.major}.{sys.version_info.minor}"
           "-testsuite`; pyenv and python.org builds ship it")
    try:
        test_package = importlib.util.find_spec("test")
    except ValueError:  # a `test` module imported without a spec
        test_package = None
    if test_package is None or test_package.origin is None or \
            Path(test_package.origin).resolve().parent != stdlib_folder() / "test":
        raise PreserveError(f"CPython's test package `test` is not installed in {sys.executable} "
                            f"(needed to run {name}): {get}")
    if importlib.util.find_spec(name) is None:
        raise PreserveError(f"CPython's test package has no {name} for {module!r}: the preserve task needs a "
                            f"module with tests of its own (if its tests were left out of this installation, {get})")
    return name


def rename_instruction(source: str) -> str | None:
    """Asks to rename the first local variable (in source order, of a function or method not nested in
    another function, three characters or more) to a name that appears nowhere in the module."""
    tree = ast.parse(source)
    taken = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} | \
            {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)} | \
            {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for qualified_name, function in functions(tree.body):
        old = first_local(function)
        if old is not None:
            new = f"{old}_local"
            while new in taken:
                new += "_"
            return RENAME.format(old=old, function=qualified_name, new=new)
    return None


def share_done(before: str, after: str, instruction: str) -> float | None:
    """The share of what `instruction` (one this module asks) asked that `after` did to `before` (`done.py`);
    None when `before` had nothing of the kind to do."""
    if rename := RENAMED.match(instruction):
        return done.rename_done(before, after, rename["function"], rename["old"], rename["new"])
    return DONE[instruction](before, after)


def functions(body: list[ast.stmt], prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, definition) of the functions and methods in `body`, in source order."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from functions(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.If, ast.Try)):  # definitions under `if sys.platform ...` or `try: import`
            yield from functions(node.body + node.orelse + getattr(node, "finalbody", []), prefix)


def first_local(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The first name the function binds in its own scope that is not a parameter, a global or a nonlocal."""
    arguments = function.args
    parameters = {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}
    parameters |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    declared, bound = set(), []
    stack = list(reversed(function.body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue  # scopes of their own (a nested definition's name is not a variable to rename either)
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.append(node.id)
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    for name in bound:
        if len(name) >= 3 and name not in parameters and name not in declared and not name.startswith("__"):
            return name
    return None


def run_tests(module: str, rewritten_source: str, test_module: str, time_limit: float = TIME_LIMIT_S,
              memory_mb: int = sandbox.MEMORY_LIMIT_MB) -> sandbox.Outcome:
    """Run CPython's `test_module` against `rewritten_source` standing in for `module`, in the sandbox.
    It passes when every test passes or is skipped (and at least one ran); otherwise the reason names the
    first failing test and its exception's line, or says why the rewritten module could not be tested."""
    for name in (module, *test_module.split(".")):
        if not NAME.match(name):
            raise PreserveError(f"{name!r} is not a module name")
    return sandbox.run_python(program(module, rewritten_source, test_module), time_limit, memory_mb)


def program(module: str, rewritten_source: str, test_module: str) -> str:
    """The program that `run_tests` runs in the sandbox."""
    return PROGRAM.format(module=module, test_module=test_module, stdlib=str(stdlib_folder()),
                               folder=REWRITTEN_FOLDER, source=repr(rewritten_source))


# Runs in the sandbox (working directory: a fresh scratch folder). Until the rewritten module is
# imported it uses only modules that the interpreter has loaded at start-up (and importlib.machinery),
# so that the rewrite takes the place of the original for everything imported later, test.support
# and unittest included. A module the interpreter itself imported at start-up is dropped from
# sys.modules and imported again from the rewritten file; modules imported before keep theirs.
PROGRAM = '''\
import importlib.machinery, os, sys

MODULE, TEST_MODULE, STDLIB = {module!r}, {test_module!r}, {stdlib!r}
sys.dont_write_bytecode = True
FOLDER, ON_PATH = os.path.join(os.getcwd(), {folder!r}), os.path.join(os.getcwd(), {folder!r} + "-path")
PATH = os.path.join(FOLDER, MODULE + ".py")
os.mkdir(FOLDER)
with open(PATH, "w", encoding="utf-8") as file:
    file.write({source})
# The rewritten file lies among links to the rest of the standard library, for tests that look for
# files beside the module (test_linecache reads abc.py from the folder of linecache.__file__).
for entry in os.listdir(STDLIB):
    if entry not in (MODULE + ".py", "__pycache__"):
        os.symlink(os.path.join(STDLIB, entry), os.path.join(FOLDER, entry))
os.mkdir(ON_PATH)  # for Python processes the tests start (unless they isolate them): the module alone
os.symlink(PATH, os.path.join(ON_PATH, MODULE + ".py"))
os.environ["PYTHONPATH"] = ON_PATH


def fail(message):
    sys.stderr.write("\\n" + " ".join(str(message).split())[:2000] + "\\n")
    sys.stderr.flush()
    os._exit(2)


class Rewritten:
    """Asked before the frozen, built-in and path finders: MODULE is the rewritten file, always (also
    for test.support.import_helper.import_fresh_module)."""
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != MODULE:
            return None
        spec = importlib.machinery.ModuleSpec(name, importlib.machinery.SourceFileLoader(name, PATH), origin=PATH)
        spec.has_location = True
        return spec


def file_of(value):
    """The file a module, or a function or class of a module, comes from (None when unknown)."""
    if isinstance(value, type(sys)):
        return getattr(value, "__file__", None)
    if isinstance(value, type):
        value = next((v for v in vars(value).values() if hasattr(v, "__globals__")), None)
    return getattr(value, "__globals__", {{}}).get("__file__")


sys.meta_path.insert(0, Rewritten)
sys.modules.pop(MODULE, None)
try:
    __import__(MODULE)
except BaseException as error:
    fail(f"the rewritten {{MODULE}} fails to import: {{type(error).__name__}}: {{error}}")
if file_of(sys.modules.get(MODULE)) != PATH:
    fail(f"the rewritten {{MODULE}} is not the one imported: it comes from {{file_of(sys.modules.get(MODULE))}}")

try:
    import io, unittest
    import test.support
except BaseException as error:  # they use the rewritten module too (unittest uses textwrap and linecache)
    fail(f"unittest and test.support fail to import with the rewritten {{MODULE}}: {{type(error).__name__}}: {{error}}")
test.support.use_resources = []  # as regrtest without -u: no network, GUI, CPU- or memory-hungry tests
try:
    tests = __import__(TEST_MODULE, fromlist=["*"])
except BaseException as error:
    fail(f"{{TEST_MODULE}} fails to import: {{type(error).__name__}}: {{error}}")
for name, value in vars(tests).items():
    is_module = isinstance(value, type(sys)) and value.__name__ == MODULE
    if (is_module or getattr(value, "__module__", None) == MODULE) and file_of(value) not in (None, PATH):
        fail(f"{{TEST_MODULE}}.{{name}} is not from the rewritten {{MODULE}} but from {{file_of(value)}}")

try:
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(
        unittest.defaultTestLoader.loadTestsFromModule(tests))
except BaseException as error:  # raised outside any test, such as by unittest reporting a failure
    fail(f"running {{TEST_MODULE}} failed: {{type(error).__name__}}: {{error}}")
problems = result.failures + result.errors + [(test, "unexpected success") for test in result.unexpectedSuccesses]
if problems:
    test, trace = problems[0]
    # The exception's own line: the first one after the last traceback's indented frames (the rest of
    # an assertion's message, such as a diff, comes after it).
    lines = trace.strip().splitlines()
    start = max((i + 1 for i, line in enumerate(lines) if line.startswith("Traceback (")), default=0)
    error = next((line for line in lines[start:] if line.strip() and not line[0].isspace()), lines[-1] if lines else "")
    fail(f"{{len(problems)}} failures in {{result.testsRun}} tests; the first: {{test.id()}}: {{error[:300]}}")
if result.testsRun == len(result.skipped):
    fail(f"no test of {{TEST_MODULE}} ran ({{result.testsRun}} skipped)")
sys.stderr.write(f"\\n{{result.testsRun}} tests passed ({{len(result.skipped)}} skipped)\\n")
sys.stderr.flush()
os._exit(0)
'''
