"""`assistant rewrite` ends cleanly on Ctrl-C (SIGINT) or SIGTERM while an answer streams: exit status 130,
"interrupted" said, the file as it was, no traceback, never SIGABRT and never a hang. A real subprocess with the
embedded model, its stdout a terminal (a pseudo-terminal), where the answer streams as it comes. While it
streams, a signal cancels the answer at its next step; a second one interrupts at once."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from assistant.cli.options import cancelling_on_signals

TEXT = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(40))
INTERRUPTED = "assistant rewrite: interrupted; the file being rewritten was left as it was\n"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_answer_streams_ends_the_command_cleanly(tmp_path, signum):
    path = tmp_path / "many.py"
    path.write_text(TEXT)
    terminal, stdout = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "assistant.cli", "rewrite", str(path), "-i",
                                "Add a docstring to every function."], stdout=stdout, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(stdout)
    try:
        shown = b""
        while not shown.strip():  # the answer's first piece is on the terminal: the model is generating
            assert select.select([terminal], [], [], 300)[0], "nothing streamed"
            shown += os.read(terminal, 4096)
        process.send_signal(signum)
        errors = process.communicate(timeout=120)[1]
    finally:
        process.kill()
        os.close(terminal)
    assert (process.returncode, errors) == (130, INTERRUPTED)
    assert path.read_text() == TEXT


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_while_an_answer_streams_a_signal_cancels_it_and_a_second_interrupts(signum):
    before = signal.getsignal(signum)
    cancel = threading.Event()
    with pytest.raises(KeyboardInterrupt), cancelling_on_signals(cancel):
        os.kill(os.getpid(), signum)
        assert cancel.wait(5)
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler has run by now; at the latest it breaks this sleep
    assert signal.getsignal(signum) is before
