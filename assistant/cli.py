"""The `assistant` command: one subcommand per job.

The engine's own subcommands (rewrite, calibrate, bench) live in this package; the front doors
that are not part of the engine (`lsp`, `web`) plug in through the `assistant.commands` entry
point group, so the engine never imports them.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from importlib.metadata import entry_points

from . import models, weights
from .engine import DEFAULT_STRATEGY, STRATEGIES


def add_model_options(parser: argparse.ArgumentParser, strategy: bool = True) -> None:
    """The options every command that loads a model shares."""
    parser.add_argument("--model", default=models.DEFAULT_MODEL,
                        help=f"embedded name ({', '.join(models.EMBEDDED)}), model folder, .gguf file or hub id")
    parser.add_argument("--weights", default=weights.DEFAULT, choices=weights.CHOICES,
                        help="the format of the linear layers: auto (the fastest measured on this machine), "
                             "float32, bfloat16, float16, int8 or int4")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    if strategy:
        parser.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=STRATEGIES)


def interrupt_on_sigterm() -> None:
    """SIGTERM is handled like Ctrl-C, so the same clean-up runs."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str] | None = None) -> int:
    from . import calibrate_cli, rewrite_cli
    from .tools import bench

    parser = argparse.ArgumentParser(prog="assistant", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in (rewrite_cli.register, calibrate_cli.register, bench.register):
        register(commands)
    for plugin in entry_points(group="assistant.commands"):
        try:
            plugin.load()(commands)
        except ImportError as error:  # a front door whose dependencies are missing; the rest still works
            print(f"assistant: the {plugin.name!r} command is unavailable: {error}", file=sys.stderr)
    args = parser.parse_args(argv)
    show_progress()
    return args.run(args)


def show_progress() -> None:
    """The engine's one-line notes on slow steps (a conversion, packing, measuring), on stderr."""
    logger = logging.getLogger("assistant")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("assistant: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
