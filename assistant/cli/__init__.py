"""The `assistant` command: one subcommand per job.

Each command is a module of this package that parses its options and calls the engine, a tool
(`assistant/bench/`) or a front door (`assistant/lsp/`, `assistant/web/`); none of those imports a
command back. Only the module of the command being run is imported, so `assistant rewrite` never
loads the language server's or the playground's libraries. Two modules are parts, not commands:
`options.py` (what every command shares) and `display.py` (how `rewrite` shows a rewrite). What every door shares is checked here before
the command runs: a malformed --engine URL is refused in one line, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from assistant import RemoteError
from assistant.cli.options import USAGE, check_engine, show_progress

COMMANDS = {  # name: what `assistant --help` says of it; the module assistant.cli.<name> registers it
    "rewrite": "rewrite files on an instruction",
    "lsp": "run the language server (stdio, or --tcp HOST:PORT)",
    "web": "serve the web playground",
    "serve": "serve the engine as an OpenAI-compatible API (for editors, the openai SDK, --engine)",
    "bench": "measure strategies on the benchmark data",
    "calibrate": "find induction heads and the PLD+(h) layer for a model",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser_for(argv).parse_args(argv)
    try:
        check_engine(args)
    except RemoteError as error:
        print(f"assistant {args.command}: {error}", file=sys.stderr)
        return USAGE
    show_progress()
    return args.run(args)


def parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The command's parser, with the options of the subcommand `argv` names (the others' names only)."""
    parser = argparse.ArgumentParser(prog="assistant", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, summary in COMMANDS.items():
        if name == chosen:
            importlib.import_module(f"assistant.cli.{name}").register(commands)
        else:
            commands.add_parser(name, help=summary)
    return parser
