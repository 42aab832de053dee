"""`assistant web`: serve the web playground (`web/app.py`) with uvicorn.

This command imports the app, never the reverse, and hands it a few records of the bench data as
samples (the playground does not import the tools).
"""

from __future__ import annotations

import argparse

from assistant.bench import data
from assistant.cli.options import add_engine_option, add_model_options, assistant_for
from assistant.http import server
from assistant.web.app import Sample, create_app, server_config


def register(commands) -> None:
    parser = commands.add_parser("web", help="serve the web playground", description="Serve the web playground.")
    add_model_options(parser)
    add_engine_option(parser)
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    def factory():
        return assistant_for(args)

    print(f"assistant web: open http://{args.host}:{args.port}/ (the model loads in the background)")
    app = create_app(factory, args.model, samples=bench_samples())
    server.run(server_config(app, args.host, args.port), app.state.generations)  # until SIGINT or SIGTERM
    return 0


def bench_samples() -> tuple[Sample, ...]:
    """The first two code and text edits of the bench data, as the playground's samples."""
    return tuple(Sample(id=record.id, task=task, instruction=record.instruction, document=record.document,
                        language=record.language) for task in ("code-edit", "text-edit") for record in data.load(task)[:2])
