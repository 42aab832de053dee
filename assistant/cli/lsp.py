"""`assistant lsp`: start the language server (`lsp/server.py`) on stdio or a TCP socket.

This command imports the server, never the reverse, as jedi-language-server's `cli.py` does.
"""

from __future__ import annotations

import logging

from assistant.cli.options import add_engine_option, add_model_options, assistant_for
from assistant.lsp.server import REQUEST_TIMEOUT, server


def register(commands) -> None:
    parser = commands.add_parser("lsp", help="run the language server (stdio, or --tcp HOST:PORT)")
    add_model_options(parser)
    add_engine_option(parser)
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead of stdio")
    parser.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT, metavar="SECONDS",
                        help="how long the editor has to answer an edit or a progress request (default %(default)s)")
    parser.set_defaults(run=run)


def run(args) -> int:
    logging.basicConfig(level=logging.WARNING)
    server.request_timeout = args.request_timeout
    server.load(lambda: assistant_for(args))
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io()
    return 0
