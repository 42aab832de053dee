"""What every command shares: the model options, --engine (checked before the command starts), SIGTERM
handled like Ctrl-C, a generation that either signal stops at its next step, and the engine's progress notes
on stderr."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import assistant
from assistant import DEFAULT_STRATEGY, STRATEGIES, Engine, config
from assistant.kernels.attention_avx2 import PRECISIONS
from assistant.model import catalog

USAGE = 2  # the exit status of a command refused as given (argparse's)


def add_model_options(parser: argparse.ArgumentParser, strategy: bool = True) -> None:
    """The options every command that loads a model shares."""
    parser.add_argument("--model", default=config.settings().model,
                        help=f"embedded name ({', '.join(catalog.EMBEDDED)}), model folder, .gguf file or hub id")
    parser.add_argument("--weights", default=config.settings().weights, choices=catalog.CHOICES,
                        help="the format of the linear layers: auto (the fastest measured on this machine), "
                             "float32, bfloat16, float16, int8, int4 or gguf (the GGUF's own blocks)")
    parser.add_argument("--attention", default=config.settings().attention, choices=PRECISIONS,
                        help="the precision of attention's products on CPU: auto (bfloat16 where the CPU has "
                             "AVX512-BF16, as a bfloat16 model's attention runs on a GPU, unless --weights is "
                             "float32; else float32), float32 or bfloat16")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    if strategy:
        parser.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=STRATEGIES)


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    """--engine, for a door that can send its requests to a server instead of loading a model."""
    parser.add_argument("--engine", default=config.settings().engine, metavar="URL",
                        help="an OpenAI-compatible server (assistant serve, vLLM, llama.cpp, Ollama) to send the "
                             "requests to instead of loading a model (default: ASSISTANT_ENGINE; its key: "
                             "ASSISTANT_API_KEY)")


def check_engine(args: argparse.Namespace) -> None:
    """Refuse (RemoteError) an --engine (or ASSISTANT_ENGINE) that is not an http(s) address, before the command
    starts: `cli.main` calls it for every door. Only a given --engine imports the remote client."""
    if getattr(args, "engine", None):
        assistant.RemoteAssistant.address(args.engine)


def assistant_for(args: argparse.Namespace) -> Engine:
    """The door's engine: the server at --engine, or the model loaded here (only then is torch imported)."""
    if args.engine:
        return assistant.RemoteAssistant(args.engine, strategy=args.strategy, api_key=config.settings().api_key)
    return assistant.Assistant(args.model, strategy=args.strategy, weights=args.weights, device=args.device,
                               attention=args.attention)


def interrupt_on_sigterm() -> None:
    """SIGTERM is handled like Ctrl-C, so the same clean-up runs."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


@contextmanager
def cancelling_on_signals(cancel: threading.Event) -> Iterator[None]:
    """Within, Ctrl-C (SIGINT) or SIGTERM sets `cancel`, so that the generation reading it stops at its next
    step, rather than raising KeyboardInterrupt on whatever line of the engine runs (a lock it held, or work it
    had counted, would stay, and closing the assistant would wait for ever); a second one raises it at once.
    The handlers before are back on leaving."""
    def handler(signum, frame):
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
    before = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handled in before.items():
            signal.signal(signum, handled)


def show_progress() -> None:
    """The engine's one-line notes on slow steps (a conversion, packing, measuring), on stderr."""
    logger = logging.getLogger("assistant")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("assistant: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
