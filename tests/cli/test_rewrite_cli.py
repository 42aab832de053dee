"""`assistant rewrite` end to end, through a subprocess, with the real embedded model.

Bad input is refused before the model loads, so those tests are fast; the model runs are kept
short (few new tokens, tiny files) because each one loads the model afresh.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assistant.checks import Check, Problem
from assistant.cli import main
from assistant.cli import rewrite as rewrite_command
from assistant.cli.display import COPIED, GENERATED, styled, summary
from assistant.cli.rewrite import (
    Refused,
    crlf_offsets,
    finish,
    read_source,
    restored,
    write_answer,
)
from assistant.engine.events import NOTHING, Repair, Result, Stats
from assistant.engine.output import Span

FAST = ["--max-new-tokens", "64"]  # enough for the tiny files here to finish
CODE = "def add(a, b):\n    return a + b\n"


def rewrite(*args: str, stdin: str | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assistant.cli", "rewrite", *args], check=False, input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def write(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# --- refused before the model loads ---

@pytest.fixture
def code(tmp_path) -> Path:
    return write(tmp_path / "code.py", CODE)


def test_bad_files_are_refused_untouched(tmp_path):
    """One run over every kind of bad file: each is named in a message and none is touched."""
    bad = {"missing": tmp_path / "nope.py", "directory": tmp_path / "folder",
           "binary": write(tmp_path / "b.bin", b"ab\x00cd\n"), "empty": write(tmp_path / "e.txt", ""),
           "blank": write(tmp_path / "blank.txt", "\n \n"),
           "latin-1": write(tmp_path / "l.txt", "caf\xe9\n".encode("latin-1")),
           "lines outside": write(tmp_path / "c.py", CODE)}
    bad["directory"].mkdir()
    before = {name: path.read_bytes() for name, path in bad.items() if path.is_file()}
    done = rewrite(*map(str, bad.values()), "-i", "x", "--in-place", "--lines", "2:9", timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    for needle in ("no such file", "is a directory", "binary", "is empty", "not valid UTF-8", "--encoding",
                   "--lines 2:9 is outside the file, which has 2 lines"):
        assert needle in done.stderr
    assert {name: path.read_bytes() for name, path in bad.items() if path.is_file()} == before
    assert leftovers(tmp_path) == [] and not list(tmp_path.glob("*~"))


def test_unreadable_file_is_refused(code):
    code.chmod(0)
    try:
        if os.access(code, os.R_OK):
            pytest.skip("running as root: every file is readable")
        done = rewrite(str(code), "-i", "x", timeout=120)
        assert done.returncode == 1 and "cannot read" in done.stderr
    finally:
        code.chmod(0o644)


def test_usage_errors_exit_2_through_the_command(code):
    done = rewrite(str(code), "-i", "x", "--diff", "--json", timeout=120)
    assert done.returncode == 2 and "--diff and --json" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["-i", "  "], "instruction is empty"),
    (["-i", "x", "--diff", "--json"], "--diff and --json"),
    (["-", "-i", "x", "--in-place"], "cannot replace stdin"),
    (["{code}", "-i", "x", "-o", "out.py"], "single input"),
    (["-i", "x", "--lines", "three"], "--lines wants"),
    (["-i", "x", "--no-backup"], "--no-backup goes with --in-place"),
    (["-i", "x", "--allow-problems"], "--allow-problems goes with --in-place or -o"),
    (["-i", "x", "--repairs", "-1"], "--repairs must be 0 or more"),
    (["-i", "x", "--lines", "\u0661:\u0662"], "--lines wants"),  # Arabic-Indic digits: int() would take them
    (["-i", "x", "--lines", "\u00b9:\u00b2"], "--lines wants"),  # superscripts: isdigit() but not int()
    (["-i", "x", "--temperature", "nan"], "--temperature"),
    (["-i", "x", "--temperature", "-0.5"], "--temperature"),
    (["-i", "x", "-o", "{tmp}/no/such/folder/out.py"], "does not exist"),
    (["-i", "x", "-o", "{unwritable}/out.py"], "not writable"),
    (["-i", "x", "-o", "{tmp}"], "not a regular file"),
    (["-i", "x", "-o", "/dev/null"], "not a regular file"),
    (["-i", "x", "-o", "{fifo}"], "not a regular file"),
])
def test_usage_errors(code, capsys, args, message):
    """The option checks themselves, in-process: each would cost a slow interpreter start otherwise.
    All of them are refused before the model loads."""
    fifo = code.parent / "fifo"
    os.mkfifo(fifo)
    places = {"{code}": str(code), "{tmp}": str(code.parent), "{fifo}": str(fifo), "{unwritable}": unwritable(code)}
    for place, path in places.items():
        args = [a.replace(place, path) for a in args]
    assert main(["rewrite", str(code), *args]) == 2
    assert message in capsys.readouterr().err
    assert code.read_text() == CODE and fifo.is_fifo()


def unwritable(code: Path) -> str:
    """A folder this process cannot create files in (root may write anywhere but in /proc/sys)."""
    folder = code.parent / "read-only"
    folder.mkdir(mode=0o555)
    return str(folder) if not os.access(folder, os.W_OK) else "/proc/sys"


# --- safe writes, in-process ---

def read(path: Path):
    return read_source(str(path), None, None)


def test_write_without_backup_keeps_the_mode(code):
    code.chmod(0o751)
    write_answer(code, b"new\n", read(code), backup=False)
    assert code.read_bytes() == b"new\n" and (code.stat().st_mode & 0o777) == 0o751
    assert leftovers(code.parent) == [] and not (code.parent / "code.py~").exists()


def test_a_file_changed_on_disk_is_not_overwritten(code):
    source = read(code)
    code.write_text(CODE + "# edited meanwhile\n")
    with pytest.raises(Refused, match="changed on disk"):
        write_answer(code, b"new\n", source, backup=True)
    assert code.read_text().endswith("# edited meanwhile\n") and leftovers(code.parent) == []


def test_an_interrupted_write_leaves_the_original_and_no_temporary_file(code, monkeypatch):
    def interrupted(fd):
        raise KeyboardInterrupt
    monkeypatch.setattr(rewrite_command.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        rewrite_command.write_answer(code, b"new\n", read(code), backup=True)
    assert code.read_text() == CODE and leftovers(code.parent) == []


def test_in_place_on_a_link_rewrites_its_target_and_keeps_the_link(code):
    link = code.parent / "link.py"
    link.symlink_to(code.name)
    write_answer(link, b"new\n", read(link), backup=True)
    assert link.is_symlink() and os.readlink(link) == code.name
    assert code.read_bytes() == b"new\n" and (code.parent / "code.py~").read_text() == CODE
    assert leftovers(code.parent) == []


def test_a_backup_that_cannot_be_written_leaves_nothing_behind(code):
    (code.parent / "code.py~").mkdir()  # a folder where the backup should go
    (code.parent / "code.py~" / "keep").write_text("x")
    with pytest.raises(Refused, match="cannot write the backup.*--no-backup"):
        write_answer(code, b"new\n", read(code), backup=True)
    assert code.read_text() == CODE and leftovers(code.parent) == []
    assert sorted(p.name for p in code.parent.iterdir()) == ["code.py", "code.py~"]


def test_owner_group_and_mode_are_kept(code):
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another owner")
    os.chown(code, 12345, 23456)
    code.chmod(0o604)
    assert write_answer(code, b"new\n", read(code), backup=False) == []
    state = code.stat()
    assert (state.st_uid, state.st_gid, state.st_mode & 0o7777) == (12345, 23456, 0o604)


def test_an_owner_that_cannot_be_kept_is_named(code, monkeypatch):
    def refused(*args):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "chown", refused)  # what a user who does not own the file meets
    code.chmod(0o640)
    lost = write_answer(code, b"new\n", read(code), backup=False)
    state = code.stat()
    assert lost == [f"its owner and group ({state.st_uid}:{state.st_gid})"] and (state.st_mode & 0o777) == 0o640


def test_utf16_files_are_read(tmp_path):
    path = write(tmp_path / "wide.txt", "caf\u00e9 au lait\n".encode("utf-16"))
    assert read_source(str(path), "utf-16", None).text == "caf\u00e9 au lait\n"


def test_a_file_without_line_breaks_keeps_lf(tmp_path):
    source = read_source(str(write(tmp_path / "one.txt", "x = 1")), None, None)
    assert not source.crlf
    assert restored(source, "x = 1\ny = 2\n", [])[0] == "x = 1\ny = 2"


def unfinished(text: str, stopped: str):
    return Result(text, [], Stats(4, 4, 1.0, 10, 0, 0, 0.1), stopped, "smollm2-135m", "float32")


@pytest.mark.parametrize("stopped, message", [("length", "--max-new-tokens"), ("cancelled", "cancelled")])
def test_an_unfinished_answer_is_not_written_to_o(tmp_path, stopped, message):
    source = read_source(str(write(tmp_path / "code.py", CODE)), None, None)
    out = tmp_path / "out.py"
    args = argparse.Namespace(json=False, diff=False, in_place=False, output=out, encoding=None, no_backup=False,
                              quiet=True)
    with pytest.raises(Refused, match=message):
        finish(source, unfinished("def add(", stopped), args, streamed=False)
    assert not out.exists() and leftovers(tmp_path) == []


# --- answers with problems, in-process ---

HINTED = "def add(a: Num, b: Num) -> Num:\n    return a + b\n"


def with_problems(text: str = HINTED, repairs: tuple = ()) -> Result:
    """A finished answer whose check found `Num` undefined (three times), as the engine would give it."""
    problems = tuple(Problem("Undefined name `Num`", at, at + 3, "F821", "ruff")
                     for at in (i for i in range(len(text)) if text.startswith("Num", i)))
    return Result(text, [], Stats(20, 8, 1.0, 10, 12, 10, 0.1), "eos", "smollm2-135m", "float32",
                  check=Check(problems, ("ruff", "structure")), repairs=repairs)


def options(**chosen) -> argparse.Namespace:
    return argparse.Namespace(**({"json": False, "diff": False, "in_place": False, "output": None, "encoding": None,
                                  "no_backup": False, "quiet": True, "allow_problems": False} | chosen))


@pytest.mark.parametrize("flag", ["in_place", "output"])
def test_an_answer_with_problems_is_not_written(tmp_path, capsys, flag):
    path = write(tmp_path / "code.py", CODE)
    out = tmp_path / "out.py"
    args = options(**({"in_place": True} if flag == "in_place" else {"output": out}))
    with pytest.raises(Refused, match=r"introduced 3 problems \(listed above\); nothing written "
                                      r"\(--allow-problems writes it anyway\)"):
        finish(read_source(str(path), None, None), with_problems(), args, streamed=False)
    assert capsys.readouterr().err.splitlines() == [f"{path}:1:12: Undefined name `Num` [F821]",
                                                    f"{path}:1:20: Undefined name `Num` [F821]",
                                                    f"{path}:1:28: Undefined name `Num` [F821]"]
    assert path.read_text() == CODE and not out.exists() and leftovers(tmp_path) == []
    assert not (tmp_path / "code.py~").exists()


def test_allow_problems_writes_it_and_still_lists_them(tmp_path, capsys):
    path = write(tmp_path / "code.py", CODE)
    finish(read_source(str(path), None, None), with_problems(), options(in_place=True, allow_problems=True),
           streamed=False)
    assert path.read_text() == HINTED and (tmp_path / "code.py~").read_text() == CODE
    assert capsys.readouterr().err.count("Undefined name `Num`") == 3


def test_diff_prints_the_problems_on_stderr_at_their_place_in_the_file(tmp_path, capsys):
    text = "import os\n\n" + CODE + "\nprint(os.sep)\n"
    path = write(tmp_path / "code.py", text)
    source = read_source(str(path), None, "3:4")  # the function alone
    finish(source, with_problems(), options(diff=True), streamed=False)
    out, err = capsys.readouterr()
    assert "+def add(a: Num, b: Num) -> Num:\n" in out
    assert err.splitlines()[0] == f"{path}:3:12: Undefined name `Num` [F821]"


def test_json_problems_are_in_the_offsets_of_its_text(tmp_path, capsys):
    path = write(tmp_path / "code.py", ("import os\n\n" + CODE).replace("\n", "\r\n"))  # CRLF, a selection
    finish(read_source(str(path), None, "3:4"), with_problems(), options(json=True), streamed=False)
    record = json.loads(capsys.readouterr().out)
    assert len(record["problems"]) == 3 and record["checks"]["ran"] == ["ruff", "structure"]
    for problem in record["problems"]:
        assert record["text"][problem["start"]:problem["end"]] == "Num"
        assert problem["line"] == 2 and record["text"].splitlines()[2][problem["character"]:].startswith("Num")


def test_the_summary_names_repairs_and_problems_left_or_unchecked():
    repair = Repair(1, (Problem("Undefined name `Num`", 0, 3, "F821", "ruff"),) * 4, (), True,
                    Stats(5, 2, 0.3, 10, 4, 3, 0.1), 0.4)
    line = summary(with_problems(repairs=(repair,)), [(0, 0.1), (4, 0.2)])  # the streamed pass's steps
    assert line.endswith("; checked (ruff, structure), 1 repair passes (1 kept): 3 problems left")
    assert "20 tokens in 8 steps" in line and "~5.0x faster" in line  # the 15 tokens streamed, in 0.3 s
    clean = with_problems("def add(a: int, b: int) -> int:\n    return a + b\n")
    assert summary(clean, []).endswith("; checked (ruff, structure): no problems left")
    fixed = Repair(1, repair.problems_before, (), True, NOTHING, 0.02, model=False)
    assert summary(with_problems(repairs=(fixed, repair)), []).endswith(
        "; checked (ruff, structure), fixed without a model, 1 repair passes (1 kept): 3 problems left")
    prose = Result("Hello.\n", [], clean.stats, "eos", "m", "float32",
                   check=Check(notes=("unchecked: prose or an unknown language",)))
    assert summary(prose, []).endswith("; unchecked (prose or an unknown language)")


# --- with the model ---

def test_an_answer_cut_at_the_token_limit_is_never_written_in_place(tmp_path):
    """The reported case: a 910-character file replaced by the first 124 characters of its answer, exit 0."""
    text = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(30))
    path = write(tmp_path / "many.py", text)
    done = rewrite(str(path), "-i", "Add a docstring to every function.", "--in-place", "--max-new-tokens", "4")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "token limit" in done.stderr and "--max-new-tokens" in done.stderr
    assert path.read_text() == text and leftovers(tmp_path) == [] and not (tmp_path / "many.py~").exists()


def check_spans(record: dict, source: str) -> None:
    for span in record["spans"]:
        (a, b), (c, d) = span["output"], span["source"]
        assert record["text"][a:b] == source[c:d]


def test_json_spans_line_endings_long_documents_and_failures(tmp_path):
    """One run: a CRLF file cut into several pieces, stdin without a final newline, a missing file."""
    paragraphs = ["def one():\r\n    return 1\r\n", "def two():\r\n    return 2\r\n",
                  "def three():\r\n    return 3\r\n"]
    long_text = "\r\n\r\n".join(paragraphs)
    long = write(tmp_path / "long.py", long_text)
    done = rewrite(str(long), "-", str(tmp_path / "missing.py"), "-i", "Copy the text exactly.", "--json",
                   "--max-piece-tokens", "12", *FAST, stdin="Hello wrold")
    assert done.returncode == 1 and "missing.py: no such file" in done.stderr
    first, second = (json.loads(line) for line in done.stdout.splitlines())
    assert first["path"] == str(long) and len(first["pieces"]) == 3
    check_spans(first, long_text)
    text = first["text"]
    assert "\n" not in text.replace("\r\n", "") and text.endswith("\r\n")
    # The seams between pieces are kept verbatim: three rewritten blocks, separated by blank lines.
    assert text.count("\r\n\r\n") >= 2
    assert first["stats"]["new_tokens"] > 0 and first["stats"]["steps"] > 0
    assert second["path"] == "-" and not second["text"].endswith("\n")
    check_spans(second, "Hello wrold")
    assert "copied" in done.stderr and "tokens/s" in done.stderr
    assert long.read_bytes() == long_text.encode()


def test_diff_of_a_line_range_from_stdin():
    text = "# Title\n\nFirst line stays.\nfix teh speling here\nLast line stays.\n"
    done = rewrite("-", "-i", "Fix the spelling.", "--diff", "--lines", "4:4", *FAST, stdin=text)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("--- a/stdin\n+++ b/stdin\n")
    removed = [line for line in done.stdout.splitlines()[2:] if line.startswith("-")]
    assert removed in ([], ["-fix teh speling here"])  # only the chosen line may change


def test_json_says_what_was_checked(code):
    """A Python file is checked (ruff), stdin without --language is not, and both records say so."""
    done = rewrite(str(code), "-", "-i", "Copy the text exactly.", "--json", *FAST, stdin="Hello wrold\n")
    assert done.returncode == 0, done.stderr
    first, second = (json.loads(line) for line in done.stdout.splitlines())
    assert "ruff" in first["checks"]["ran"] and isinstance(first["problems"], list)
    assert isinstance(first["repairs"], list)
    assert second["checks"]["ran"] == [] and second["checks"]["notes"] == ["unchecked: prose or an unknown language"]
    assert "unchecked" in done.stderr and "checked (ruff" in done.stderr


def test_plain_text_to_stdout(code):
    done = rewrite(str(code), "-i", "Copy the text exactly.", *FAST, "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n") and done.stdout.strip() and "copied" not in done.stderr


def test_in_place_with_backup(tmp_path):
    """Written with a backup, the mode kept; or, when the small model gives the text back as it was, said so
    and nothing written (no backup either)."""
    path = write(tmp_path / "code.py", CODE)
    path.chmod(0o640)
    done = rewrite(str(path), "-i", "Rename add to plus.", "--in-place", *FAST)
    assert done.returncode == 0, done.stderr
    assert (path.stat().st_mode & 0o777) == 0o640 and path.read_text().endswith("\n")
    if f"{path}: no change made: the answer is the text as it was; nothing written" in done.stderr:
        assert path.read_text() == CODE and not (tmp_path / "code.py~").exists()
    else:
        assert f"written to {path}" in done.stderr and (tmp_path / "code.py~").read_text() == CODE
    assert leftovers(tmp_path) == []


def test_interrupted_in_place_leaves_the_original(tmp_path):
    # Long enough (several pieces) that the rewrite cannot be over before the interrupt lands.
    text = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(200))
    path = write(tmp_path / "many.py", text)
    process = subprocess.Popen([sys.executable, "-m", "assistant.cli", "rewrite", str(path), "-i",
                                "Add a docstring to every function.", "--in-place", "--max-new-tokens", "1000",
                                "--weights", "float16"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               # as from a terminal: an ignored SIGINT in this process would be inherited
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for_generation(process)
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"still running 60 s after SIGINT; its stderr: {process.communicate()[1][-3000:]}")
    assert path.read_text() == text
    assert leftovers(tmp_path) == [] and not (tmp_path / "many.py~").exists()
    # Before Assistant.close(), a Ctrl-C during a first start's cost measurement ended in SIGABRT (-6)
    # here: say why if it recurs.
    assert process.returncode == 130 and "interrupted" in stderr, stderr[-3000:]


def wait_for_generation(process: subprocess.Popen) -> None:
    """Return a moment after the weights are loaded (compact weights say so when they are packed), so the
    interrupt lands during generation."""
    for line in iter(process.stderr.readline, ""):
        if "linear layers as" in line:
            break
    time.sleep(2)


# --- showing, in-process ---

def test_copied_and_generated_text_are_styled_apart():
    text = styled("abcdef", [Span((12, 14), (0, 2))], 10)  # this Delta starts at output offset 10
    assert [(s.start, s.end, s.style) for s in text.spans] == [(0, 2, GENERATED), (2, 4, COPIED),
                                                                (4, 6, GENERATED)]


def test_crlf_offsets_move_past_the_restored_carriage_returns():
    text = "ab\ncd\n"
    to_crlf = crlf_offsets(text)
    restored = text.replace("\n", "\r\n")
    assert [restored[to_crlf(a):to_crlf(b)] for a, b in [(0, 3), (3, 6), (2, 4)]] == ["ab\r\n", "cd\r\n", "\r\nc"]


# --- answers that made no edit, in-process ---

def answered(text: str, change: str) -> Result:
    """A finished answer the engine found to make the change `change` (`Result.change`)."""
    return Result(text, [], Stats(8, 4, 1.0, 10, 6, 4, 0.1), "eos", "smollm2-135m", "float32", change=change)


def test_an_answer_that_is_the_text_as_it_was_is_not_written_in_place(tmp_path, capsys):
    """Nothing to write, so nothing written (no backup either), said even with --quiet, and no failure."""
    path = write(tmp_path / "code.py", CODE)
    finish(read_source(str(path), None, None), answered(CODE, "none"), options(in_place=True, quiet=True),
           streamed=False)
    assert capsys.readouterr().err == f"{path}: no change made: the answer is the text as it was; nothing written\n"
    assert path.read_text() == CODE and sorted(p.name for p in tmp_path.iterdir()) == ["code.py"]


@pytest.mark.parametrize("change, text, said", [
    ("comments", CODE.replace("\n", "  # sum\n", 1), "only comments changed"),
    ("layout", CODE.replace("a, b", "a,b"), "only the layout changed (whitespace, line breaks or quotes)")])
@pytest.mark.parametrize("flag", ["in_place", "output"])
def test_an_answer_that_changed_only_layout_or_comments_is_written_and_said_to_make_no_change(tmp_path, capsys,
                                                                                              change, text, said, flag):
    """The text did change, and it is the model's answer (the instruction may have asked for just that): it is
    written, and the command says it made no edit rather than a plain 'written to'."""
    path = write(tmp_path / "code.py", CODE)
    target = path if flag == "in_place" else tmp_path / "out.py"
    args = options(**({"in_place": True} if flag == "in_place" else {"output": target}), quiet=True)
    finish(read_source(str(path), None, None), answered(text, change), args, streamed=False)
    assert capsys.readouterr().err == f"{path}: no change made: {said}; written to {target}\n"
    assert target.read_text() == text


@pytest.mark.parametrize("shown", ["diff", "json", "stdout"])
def test_no_change_is_said_whatever_the_output_and_json_carries_change(tmp_path, capsys, shown):
    path = write(tmp_path / "code.py", CODE)
    finish(read_source(str(path), None, None), answered(CODE, "none"), options(**{shown: True} if shown != "stdout"
                                                                                  else {}), streamed=False)
    out, err = capsys.readouterr()
    assert err == f"{path}: no change made: the answer is the text as it was\n"
    assert out == {"diff": "", "stdout": CODE}.get(shown, out) and path.read_text() == CODE
    if shown == "json":
        assert json.loads(out)["change"] == "none"


def test_an_edit_is_not_said_to_make_no_change(tmp_path, capsys):
    path = write(tmp_path / "code.py", CODE)
    finish(read_source(str(path), None, None), answered(CODE.replace("add", "plus"), "edit"),
           options(in_place=True, quiet=False), streamed=False)
    assert capsys.readouterr().err == f"{path}: written to {path}\n" and "plus" in path.read_text()
