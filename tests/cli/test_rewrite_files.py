"""`assistant rewrite --in-place` keeps what a file had: its byte-order mark (which the model never
sees, so the answer is the one the same text without it gets) and its hard links (the content is
written over in place, after a copy of the old text, so every name sees the new text)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from assistant.cli import rewrite as rewrite_command
from assistant.cli.rewrite import Refused, read_source, write_answer

CODE = "def add(a, b):\n    return a + b\n"
BOM = b"\xef\xbb\xbf"


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".tmp", ".original")))


def test_in_place_keeps_the_byte_order_mark_and_the_answer_of_the_text_without_it(tmp_path):
    marked, plain = tmp_path / "marked.py", tmp_path / "plain.py"
    marked.write_bytes(BOM + CODE.encode())
    plain.write_bytes(CODE.encode())
    done = subprocess.run([sys.executable, "-m", "assistant.cli", "rewrite", str(marked), str(plain), "-i",
                           "Rename add to plus.", "--in-place", "--max-new-tokens", "64", "--quiet"],
                          check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert marked.read_bytes() == BOM + plain.read_bytes()
    assert not plain.read_bytes().startswith((b"\n", BOM))


@pytest.mark.parametrize("encoding, data", [(None, BOM + CODE.encode()), ("utf-8", BOM + CODE.encode()),
                                            ("utf-16-le", "\ufeff".encode("utf-16-le") + CODE.encode("utf-16-le"))])
def test_a_byte_order_mark_is_kept_out_of_the_text(tmp_path, encoding, data):
    path = tmp_path / "marked.py"
    path.write_bytes(data)
    source = read_source(str(path), encoding, "1:1")
    assert (source.text, source.bom, source.selection) == (CODE, True, (0, 15))


def test_a_file_of_a_byte_order_mark_alone_is_empty(tmp_path):
    path = tmp_path / "empty.py"
    path.write_bytes(BOM + b"\n")
    with pytest.raises(Refused, match="is empty"):
        read_source(str(path), None, None)


@pytest.fixture
def linked(tmp_path) -> tuple[Path, Path]:
    """A file and a second hard link to it."""
    path = tmp_path / "code.py"
    path.write_text(CODE)
    os.link(path, tmp_path / "other.py")
    return path, tmp_path / "other.py"


@pytest.mark.parametrize("backup", [True, False])
def test_a_hard_linked_file_is_written_in_place_so_every_name_sees_it(linked, backup):
    path, other = linked
    inode = path.stat().st_ino
    assert write_answer(path, b"new\n", read_source(str(path), None, None), backup=backup) == []
    assert other.read_bytes() == b"new\n" and path.stat().st_ino == inode and path.stat().st_nlink == 2
    assert (path.parent / "code.py~").exists() is backup and leftovers(path.parent) == []
    if backup:
        assert (path.parent / "code.py~").read_text() == CODE


def test_a_failed_write_over_a_hard_linked_file_says_where_its_old_text_is(linked, monkeypatch):
    path, _ = linked
    source = read_source(str(path), None, None)

    def full(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(rewrite_command.os, "fsync", full)
    with pytest.raises(Refused, match=r"writing it in place failed \(No space left on device\); its old text is in "
                                      r".*\.code\.py\.original"):
        write_answer(path, b"new\n", source, backup=False)
    assert (path.parent / ".code.py.original").read_text() == CODE
