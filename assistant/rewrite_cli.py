"""`assistant rewrite FILE -i INSTRUCTION`: rewrite a file and print the result."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def register(commands) -> None:
    from .cli import add_model_options

    parser = commands.add_parser("rewrite", help="rewrite a file on an instruction")
    parser.add_argument("path", type=Path)
    parser.add_argument("-i", "--instruction", required=True)
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--json", action="store_true", help="print one JSON object: text, spans, stats")
    add_model_options(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    from .engine import Assistant, RewriteError
    from .models import ModelError

    try:
        document = args.path.read_text(encoding="utf-8")
        assistant = Assistant(args.model, strategy=args.strategy, dtype=args.dtype, device=args.device)
        result = assistant.rewrite_text(document, args.instruction, max_new_tokens=args.max_new_tokens)
    except (OSError, UnicodeDecodeError, RewriteError, ModelError) as error:
        print(f"assistant rewrite: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_json()) if args.json else result.text)
    return 0
