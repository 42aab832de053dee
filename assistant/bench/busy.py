"""A busy machine for `assistant bench --busy N`: N CPU-bound processes spinning beside a measurement,
as an editor, a compiler or a browser does on a developer's laptop, and what they cost each strategy.

Each run is measured quiet, then again at once with the spinners beside it, so the ratio of the two
is taken on the same record, back to back, whatever else the machine does meanwhile; the busy run's
text must be the quiet run's (only waiting may change under load, never a result). The busy rows are
summarized by the report, with the same pooling as the quiet ones (`report.summarize_busy`).

Invariant: no spinner outlives its measurement: `spinning` kills them when its block ends, whatever
ends it, and a spinner whose parent died (killed, so no block ended) stops by itself within a second.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from assistant.bench.report import decode_seconds, ratio

# `while True: pass`, asking every few million turns whether the process that started it still lives.
SPIN = "import os, sys\nwhile os.getppid() == int(sys.argv[1]):\n    for _ in range(2_000_000):\n        pass\n"


@contextmanager
def spinning(processes: int) -> Iterator[list[subprocess.Popen]]:
    """`processes` CPU-bound processes running while inside."""
    spinners: list[subprocess.Popen] = []
    try:
        for _ in range(processes):
            spinners.append(subprocess.Popen([sys.executable, "-S", "-c", SPIN, str(os.getpid())]))
        yield spinners
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def row(quiet: dict, busy: dict, processes: int) -> dict:
    """The busy run's row: its own figures, how much slower than the quiet run it was (in all, and after
    the first token), and whether it gave the quiet run's text."""
    return {**busy, "busy": processes, "quiet_seconds": quiet["seconds"], "quiet_new_tokens": quiet["new_tokens"],
            "quiet_decode_seconds": decode_seconds(quiet), "busy_over_quiet": ratio(busy["seconds"], quiet["seconds"]),
            "same_as_quiet": busy["text"] == quiet["text"]}
