"""`--engine URL` is checked before any door starts: a malformed URL (a port out of range or not a number, an
unclosed IPv6 bracket, another scheme) is refused by `assistant rewrite`, `lsp` and `web` alike in one line
with exit status 2, the files untouched and nothing started. In-process, through `cli.main`, as the command
runs it; one real process shows what a user sees."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assistant import RemoteError
from assistant.cli import main
from assistant.engine.remote import RemoteAssistant

CODE = "def add(a, b):\n    return a + b\n"
MALFORMED = {"http://127.0.0.1:99999": "Port out of range", "http://127.0.0.1:80a0": "could not be cast to integer",
             "http://[::1": "Invalid IPv6 URL", "http://127.0.0.1:0": "port 0", "ftp://127.0.0.1:8000": "not an http(s)",
             "http://:8000": "not an http(s) address with a host"}


@pytest.mark.parametrize("door", ["rewrite", "lsp", "web"])
@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_engine_url_is_refused_at_start_by_every_door(tmp_path, capsys, door, url):
    path = tmp_path / "code.py"
    path.write_text(CODE)
    arguments = [str(path), "-i", "Rename add to plus.", "--in-place"] if door == "rewrite" else []
    assert main([door, *arguments, "--engine", url]) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"assistant {door}: the engine URL {url!r} ") and MALFORMED[url] in said
    assert said.count("\n") == 1 and path.read_text() == CODE and sorted(os.listdir(tmp_path)) == ["code.py"]


def test_the_environment_s_engine_is_checked_too(tmp_path):
    """ASSISTANT_ENGINE is --engine's default, and checked the same way; a real process, no traceback."""
    path = tmp_path / "code.py"
    path.write_text(CODE)
    done = subprocess.run([sys.executable, "-m", "assistant.cli", "rewrite", str(path), "-i", "Rename add to plus.",
                           "--in-place"], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "ASSISTANT_ENGINE": "http://[::1"})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("assistant rewrite: the engine URL 'http://[::1' is malformed (Invalid IPv6 URL); give one "
                           "such as http://127.0.0.1:8000\n")
    assert path.read_text() == CODE


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(max_size=40) | st.builds("http://{}:{}".format, st.text(max_size=12), st.text(max_size=8)))
def test_any_engine_url_is_an_address_or_a_remote_error(url):
    """No text given as --engine raises anything but RemoteError, and what is accepted has a host and a port
    in range."""
    try:
        parts = RemoteAssistant.address(url)
    except RemoteError as error:
        assert "\n" not in str(error).replace(repr(url), "")
    else:
        assert parts.scheme in ("http", "https") and parts.hostname and (parts.port is None or 0 < parts.port < 65536)
