"""Syntax checks of data formats (JSON, JSON with comments, TOML, YAML, INI, XML) by their own parsers, the
model-free unbreak of a broken data edit, and the file names that say a format."""

from __future__ import annotations

import pytest

from assistant.checks import applied, check_edit, language_of, unbroken_edit
from assistant.checks.formats import FORMATS
from assistant.checks.unbreak import unbreaking

BUMP = "Bump the version."
PACKAGE = '{\n  "name": "demo",\n  "version": "1.0.0",\n  "scripts": {\n    "test": "jest"\n  }\n}\n'
PYPROJECT = '[project]\nname = "demo"\nversion = "0.1.0"\ndependencies = ["rich>=13"]\n'
WORKFLOW = "on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n      - run: make test\n"
SETUP_CFG = "[metadata]\nname = demo\nversion = 0.1.0\n\n[options]\npackages = find:\n"
POM = '<project>\n  <version>1.0.0</version>\n  <name>demo</name>\n</project>\n'
TSCONFIG = '{\n  // the compiler\n  "compilerOptions": {\n    "strict": true,\n  },\n}\n'

# language: (a valid document, a clean edit's (old, new), a breaking edit's (old, new), the 1-based line it breaks)
DOCUMENTS = {
    "json": (PACKAGE, ('"1.0.0"', '"1.0.1"'), ('"1.0.0",', '"1.0.1"'), 3),
    "jsonc": (TSCONFIG, ("the compiler", "TypeScript"), ('"strict": true,', '"strict" true,'), 4),
    "toml": (PYPROJECT, ('"0.1.0"', '"0.2.0"'), ('"0.1.0"', '"0.2.0'), 3),
    "yaml": (WORKFLOW, ("make test", "make check"), ("runs-on: ubuntu-latest", "runs-on: ubuntu: latest"), 4),
    "ini": (SETUP_CFG, ("0.1.0", "0.2.0"), ("version = 0.1.0", "version 0.2.0"), 3),
    "xml": (POM, ("1.0.0", "1.0.1"), ("1.0.0</version>", "1.0.1</versio>"), 2),
}


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def test_every_format_has_a_test():
    assert set(DOCUMENTS) == set(FORMATS)


@pytest.mark.parametrize("language", sorted(DOCUMENTS))
def test_a_broken_edit_is_named_at_its_line(language):
    before, _, (old, new), line = DOCUMENTS[language]
    after = before.replace(old, new)
    check = check_edit(before, after, language=language, instruction=BUMP)
    assert check.ran == (FORMATS[language][0],) and check.notes == ()
    [problem] = check.problems
    assert problem.code == "syntax" and problem.message.startswith("syntax error: ")
    assert 0 <= problem.start <= problem.end <= len(after)
    assert line_of(after, problem.start) == line


@pytest.mark.parametrize("language", sorted(DOCUMENTS))
def test_a_clean_edit_passes(language):
    before, (old, new), _, _ = DOCUMENTS[language]
    check = check_edit(before, before.replace(old, new), language=language, instruction=BUMP)
    assert check.checked and check.problems == () and check.notes == ()


@pytest.mark.parametrize("language", sorted(DOCUMENTS))
def test_a_document_broken_before_is_not_blamed_for_it(language):
    before, (old, new), (broken_old, broken_new), _ = DOCUMENTS[language]
    broken = before.replace(broken_old, broken_new)
    assert check_edit(before, broken, language=language, instruction=BUMP).problems
    edited = broken.replace(old, new) if old in broken else broken + ("\n" if language != "xml" else "")
    assert check_edit(broken, edited, language=language, instruction=BUMP).problems == ()


def test_a_new_error_before_an_old_one_is_blamed():
    broken = PACKAGE.replace('"jest"', '"jest",')  # a trailing comma: not JSON
    after = broken.replace('"name": "demo",', '"name": "demo"')
    [problem] = check_edit(broken, after, language="json", instruction=BUMP).problems
    assert line_of(after, problem.start) == 2 and problem.message == "syntax error: Expecting ',' delimiter"
    assert problem.start == after.index('"demo"') + len('"demo"')  # where the comma belongs


def test_json_allows_no_comments_and_jsonc_no_stray_commas():
    commented = PACKAGE.replace('  "name"', '  // the package\n  "name"')
    assert check_edit(PACKAGE, commented, language="json", instruction=BUMP).problems
    assert not check_edit(PACKAGE, commented, language="jsonc", instruction=BUMP).problems
    added = TSCONFIG.replace("true,", 'true,\n    "noEmit" true,')
    [problem] = check_edit(TSCONFIG, added, language="jsonc", instruction=BUMP).problems
    assert line_of(added, problem.start) == 5 and problem.message == "syntax error: Expecting ':' delimiter"


def test_offsets_are_string_indices_after_non_ascii_text():
    before = 'title = "héllo 😀 日本"\nversion = "1"\n'
    after = before.replace('"1"', '"1')
    [problem] = check_edit(before, after, language="toml", instruction=BUMP).problems
    assert after[problem.start - 2:problem.start] == '"1'
    yaml_before = "title: héllo 😀\nitems: [1, 2]\n"
    yaml_after = yaml_before.replace("[1, 2]", "[1, 2")
    [problem] = check_edit(yaml_before, yaml_after, language="yaml", instruction=BUMP).problems
    assert line_of(yaml_after, problem.start) >= 2


def test_yaml_tags_and_several_documents_are_yaml():
    before = "a: !Ref Bucket\n---\nb: 2\n"
    assert check_edit(before, before.replace("2", "3"), language="yaml", instruction=BUMP).problems == ()


def test_a_documenting_edit_of_a_format_says_its_structure_is_not_compared():
    after = WORKFLOW.replace("jobs:\n", "# the jobs\njobs:\n")
    check = check_edit(WORKFLOW, after, language="yaml", instruction="Add comments.")
    assert check.ran == ("pyyaml",) and check.problems == ()
    assert check.notes == ("structure not checked: documentation edits of yaml are checked for syntax only",)


def test_the_unbreak_puts_back_the_line_that_broke_a_json_edit():
    before = PACKAGE
    after = before.replace('"1.0.0",', '"1.0.1"').replace('"jest"', '"vitest"')
    [fix] = unbreaking(before, after, "json")
    assert fix.text == '  "version": "1.0.0",\n'
    repaired = applied(after, [fix])
    assert repaired == before.replace('"jest"', '"vitest"')
    assert check_edit(before, repaired, language="json", instruction=BUMP).problems == ()


def test_a_documenting_edit_that_broke_yaml_is_unbroken_without_a_model():
    after = WORKFLOW.replace("jobs:\n", "# the jobs\njobs: [\n").replace("make test", "make test  # all")
    fixes = unbroken_edit(WORKFLOW, after, language="yaml", instruction="Add comments.")
    assert applied(after, fixes) == WORKFLOW.replace("make test", "make test  # all")


@pytest.mark.parametrize(("name", "language"), [
    ("package.json", "json"), ("pyproject.toml", "toml"), (".github/workflows/ci.yml", "yaml"),
    ("docker-compose.yaml", "yaml"), ("tsconfig.json", "jsonc"), ("tsconfig.base.json", "jsonc"),
    (".vscode/settings.json", "jsonc"), ("Cargo.lock", "toml"), ("Pipfile", "toml"), ("setup.cfg", "ini"),
    ("tox.ini", "ini"), (".flake8", "ini"), ("pom.xml", "xml"), ("icon.svg", "xml"), ("jsonc", "jsonc"),
    ("yml", "yaml"), ("dockercompose", "yaml"), ("notebook.ipynb", "json"), ("yarn.lock", None),
])
def test_language_of_names_data_formats(name, language):
    assert language_of(name) == language
