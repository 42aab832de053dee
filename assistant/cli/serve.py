"""`assistant serve`: serve the engine as an OpenAI-compatible API (`serve/app.py`) with uvicorn.

This command imports the app, never the reverse. It refuses to bind an address other machines can
reach unless an API key is given, before the model loads.
"""

from __future__ import annotations

import argparse
import sys

from assistant import Assistant, config
from assistant.cli.options import add_model_options
from assistant.http import server
from assistant.serve.app import NoKeyForOpenAddress, check_bind, create_app, server_config


def register(commands) -> None:
    parser = commands.add_parser("serve", help="serve the engine as an OpenAI-compatible API",
                                 description="Serve the engine as an OpenAI-compatible API (/v1/chat/completions, "
                                             "/v1/completions, /v1/models, /health).")
    add_model_options(parser)
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; any other "
                                                             "needs --api-key)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--api-key", default=config.settings().api_key, metavar="KEY",
                        help="require 'Authorization: Bearer KEY' on every /v1 request (default: ASSISTANT_API_KEY)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        check_bind(args.host, args.api_key)
    except NoKeyForOpenAddress as error:
        print(f"assistant serve: {error}", file=sys.stderr)
        return 2

    def factory():
        return Assistant(args.model, strategy=args.strategy, weights=args.weights, device=args.device,
                         attention=args.attention)

    print(f"assistant serve: http://{args.host}:{args.port}/v1 (the model loads in the background; GET /health "
          f"answers 200 once it is ready)", file=sys.stderr)
    app = create_app(factory, args.model, args.api_key)
    server.run(server_config(app, args.host, args.port), app.state.generations)  # until SIGINT or SIGTERM
    return 0
