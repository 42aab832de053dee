"""`assistant bench`: the options of the benchmark (`assistant/bench/`: plan.py checks them before the model
loads, run.py measures, report.py reports).

    assistant bench --tasks code-edit,text-edit --strategies ar,hf-pld,pld,pld+h,pld+a --samples 5
"""

from __future__ import annotations

import sys
from pathlib import Path

from transformers.utils import logging as hf_logging

from assistant import Assistant, ModelError
from assistant.bench import data, plan
from assistant.bench import run as bench_run
from assistant.cli.options import add_model_options, interrupt_on_sigterm


def register(commands) -> None:
    parser = commands.add_parser("bench", help="measure strategies on the benchmark data")
    parser.add_argument("--tasks", default=",".join(plan.DEFAULT_TASKS),
                        help=f"comma-separated: {', '.join(data.TASKS)}")
    parser.add_argument("--strategies", default=",".join(plan.DEFAULT_STRATEGIES),
                        help=f"comma-separated: {', '.join(plan.STRATEGIES)} (ar always runs: it is the reference); "
                             "an engine strategy may name other weights (pld+h@float32) or another number of "
                             "repair passes (pld+h@repairs=0: repair off); reference-prompt runs CanItEdit's own chat prompt "
                             "through the engine, on the canitedit task only")
    parser.add_argument("--samples", type=int, default=5, help="records per task (eval split)")
    parser.add_argument("--records", help="comma-separated record ids (as rows.jsonl names them) to run instead of "
                                          "--samples of each task: a run again, on just the records that matter; "
                                          "preserve-MODULE-INSTRUCTION names any pure-Python standard-library "
                                          "module with tests of its own (preserve-glob-type-hints)")
    parser.add_argument("--max-new-tokens", type=int,
                        help="cut every answer at this many tokens (default: none is cut; each gets the budget the "
                             "front doors give, room for a whole rewrite)")
    parser.add_argument("--max-draft", type=int,
                        help="the adaptive draft length's ceiling, past which a draft grows only while drafts at it "
                             "are accepted whole (default: the model's tuned value)")
    parser.add_argument("--busy", type=int, nargs="?", const=1, default=0, metavar="N",
                        help="run each measurement again at once with N CPU-bound processes spinning beside it "
                             "(default 1): what a busy machine costs each strategy")
    parser.add_argument("--out", type=Path, help="results folder (default bench-results/<timestamp>)")
    add_model_options(parser, strategy=False)
    parser.set_defaults(run=run)


def run(args) -> int:
    try:
        planned = plan.plan(args)
    except plan.BenchError as error:
        print(f"assistant bench: {error}", file=sys.stderr)
        return 2
    hf_logging.set_verbosity_error()  # generate() warns about the model's sampling defaults on every call
    interrupt_on_sigterm()  # a stopped run still writes its summary of what was measured

    def load(weights: str, **options) -> Assistant:
        # Prefix reuse off: every strategy pays its own prefill, as hf-pld does; it is measured on its own.
        return Assistant(args.model, weights=weights, device=args.device, prefix_cache_mb=0,
                         draft_ceiling=args.max_draft, **({"attention": args.attention} | options))

    try:
        assistant = load(args.weights)
    except ModelError as error:
        print(f"assistant bench: {error}", file=sys.stderr)
        return 2
    return 130 if bench_run.run(planned, assistant, args.model, load) else 0
