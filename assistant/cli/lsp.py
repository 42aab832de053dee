"""`assistant lsp`: start the language server (`lsp/server.py`) on stdio or a TCP socket.

This command imports the server, never the reverse, as jedi-language-server's `cli.py` does.
"""

from __future__ import annotations

import argparse
import logging
import sys

from assistant.cli.options import add_engine_option, add_model_options, assistant_for
from assistant.lsp.server import REQUEST_TIMEOUT, server


def register(commands) -> None:
    parser = commands.add_parser("lsp", help="run the language server (stdio, or --tcp HOST:PORT)")
    add_model_options(parser)
    add_engine_option(parser)
    parser.add_argument("--tcp", metavar="HOST:PORT", type=address, help="listen on a TCP socket instead of stdio")
    parser.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT, metavar="SECONDS",
                        help="how long the editor has to answer an edit or a progress request (default %(default)s)")
    parser.set_defaults(run=run)


def address(text: str) -> tuple[str, int]:
    """(host, port) of a --tcp HOST:PORT (or :PORT, on 127.0.0.1); anything else is a usage error."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT with a port from 0 to 65535")
    return host or "127.0.0.1", int(port)


def run(args) -> int:
    logging.basicConfig(level=logging.WARNING)
    server.request_timeout = args.request_timeout
    server.load(lambda: assistant_for(args))
    if not args.tcp:
        server.start_io()
        return 0
    try:
        server.start_tcp(*args.tcp)
    except OSError as error:  # the port is taken, or the host is not this machine's
        print(f"assistant lsp: cannot listen on {args.tcp[0]}:{args.tcp[1]}: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0
