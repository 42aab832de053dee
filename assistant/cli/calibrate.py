"""`assistant calibrate`: find a model's induction heads and hidden-state layer on held-out prompts."""

from __future__ import annotations

import sys

from assistant.bench import calibration, data
from assistant.cli.options import add_model_options
from assistant import Assistant, ModelError, RewriteError
from assistant.model import tuning


def register(commands) -> None:
    parser = commands.add_parser("calibrate", help="find induction heads and the PLD+(h) layer for a model")
    parser.add_argument("--records", type=int, default=12, help="calibration records per edit task")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    add_model_options(parser, strategy=False)
    parser.set_defaults(run=run)


def run(args) -> int:
    try:
        assistant = Assistant(args.model, strategy="pld", weights=args.weights, device=args.device,
                              attention=args.attention)
    except ModelError as error:
        print(f"assistant calibrate: {error}", file=sys.stderr)
        return 2
    try:
        prompts, outputs = [], []
        records = [r for task in data.EDIT_TASKS for r in data.load(task, "calibration")[:args.records]]
        for number, record in enumerate(records, 1):
            try:
                prompt = assistant.prompt(record.document, record.instruction)
                result = assistant.rewrite_text(record.document, record.instruction,
                                                max_new_tokens=args.max_new_tokens)
            except RewriteError as error:  # too long for this model's context
                print(f"skipping {record.id}: {error}", file=sys.stderr)
                continue
            prompts.append(prompt.ids)
            outputs.append(assistant.loaded.tokenizer(result.text, add_special_tokens=False)["input_ids"])
            print(f"[{number}/{len(records)}] {record.id}: {result.stats.new_tokens} tokens", file=sys.stderr)
        settings, speeds = calibration.calibrate(assistant.loaded, prompts, outputs, assistant.measured_costs())
        path = tuning.save(assistant.loaded, settings)
        replayed = ", ".join(f"{most}: {speed:.2f}" for most, speed in speeds.items())
        print(f"hidden layer {settings.hidden_layer}; top heads {settings.heads[:8]}; "
              f"draft ceiling {settings.draft_tokens} (tokens per one-token forward, replayed with n-gram drafts, "
              f"by ceiling: {replayed}); saved to {path}")
        return 0
    finally:
        assistant.close()
