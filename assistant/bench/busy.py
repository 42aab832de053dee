"""A busy machine for `assistant bench --busy N`: N CPU-bound processes spinning beside a measurement,
as an editor, a compiler or a browser does on a developer's laptop, and what they cost each strategy.

Each run is measured quiet, then again at once with the spinners beside it, so the ratio of the two
is taken on the same record, back to back, whatever else the machine does meanwhile; the busy run's
text must be the quiet run's (only waiting may change under load, never a result).

Invariant: no spinner outlives its measurement: `spinning` kills them when its block ends, whatever
ends it, and a spinner whose parent died (killed, so no block ended) stops by itself within a second.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.table import Table

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


def decode_seconds(row: dict) -> float | None:
    """The time after the first token (None for a generator that does not say when that came)."""
    return None if row["first_token_seconds"] is None else row["seconds"] - row["first_token_seconds"]


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def summarize(rows: list[dict], tasks: list[str], strategies: list[str]) -> list[dict]:
    """Per task and strategy: tokens/s quiet and busy over the same records, and busy time over quiet."""
    summary = []
    for task in tasks:
        for strategy in strategies:
            mine = [r for r in rows if r["task"] == task and r["strategy"] == strategy]
            if not mine:
                continue
            quiet, busy = sum(r["quiet_seconds"] for r in mine), sum(r["seconds"] for r in mine)
            decoding = [r for r in mine if r["quiet_decode_seconds"] is not None]
            decode = ratio(sum(decode_seconds(r) for r in decoding), sum(r["quiet_decode_seconds"] for r in decoding))
            summary.append({"task": task, "strategy": strategy, "records": len(mine), "busy": mine[0]["busy"],
                            "quiet_tokens_per_second": sum(r["quiet_new_tokens"] for r in mine) / quiet if quiet else None,
                            "busy_tokens_per_second": sum(r["new_tokens"] for r in mine) / busy if busy else None,
                            "busy_over_quiet": ratio(busy, quiet),
                            "decode_busy_over_quiet": decode if len(decoding) == len(mine) else None,
                            "same_as_quiet": sum(r["same_as_quiet"] for r in mine) / len(mine)})
    return summary


def table(summary: list[dict]) -> Table:
    processes = summary[0]["busy"]
    t = Table(title=f"a busy machine: each run again with {processes} CPU-bound process"
                    f"{'es' * (processes > 1)} spinning beside it, at once")
    for name in ("task", "strategy", "n", "tok/s quiet", "tok/s busy", "busy time / quiet", "after 1st token",
                 "same text"):
        t.add_column(name, justify="left" if name in ("task", "strategy") else "right")
    for s in summary:
        t.add_row(s["task"], s["strategy"], str(s["records"]), f"{s['quiet_tokens_per_second']:.1f}",
                  f"{s['busy_tokens_per_second']:.1f}", f"{s['busy_over_quiet']:.2f}x",
                  "n/a" if s["decode_busy_over_quiet"] is None else f"{s['decode_busy_over_quiet']:.2f}x",
                  f"{s['same_as_quiet']:.0%}")
    return t
