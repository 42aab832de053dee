"""The `assistant` command: one subcommand per job.

Each command is a module of this package that parses its options and calls the engine, a tool
(`assistant/tools/`) or a front door (`lsp/`, `web/`); none of those imports a command back.
"""

from __future__ import annotations

import argparse

from . import bench, calibrate, lsp, rewrite, web
from .options import show_progress


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="assistant", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (rewrite, calibrate, bench, lsp, web):
        command.register(commands)
    args = parser.parse_args(argv)
    show_progress()
    return args.run(args)
