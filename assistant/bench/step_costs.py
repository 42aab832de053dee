"""What one forward costs, in `assistant bench`: the engine's against llama.cpp's, in the same run.

End-to-end tokens/s mixes the prefill, the draft acceptance and the cost of a forward; issue 13's
targets are about the last two apart: a one-token step and a 16-token verification after a
1,500-token context, and the 1,500-token prefill itself. Every engine (each weights loaded, and
llama.cpp) is fed the same real token ids (the bench records' text), with the same threads, and
each cost is the best of a few rounds in which the engines take turns, so that load on the
machine, or a VM slowing down during the run, hurts them alike (measured one engine after the
other, a VM that slowed by 1.6x made one engine's step look 1.6x dearer than in the run before).
llama.cpp's verification asks for the logits of all 16 rows, as the engine's does (its plain
decoding asks only for the last row's).

Beside the bare forward, a one-token step of the engine's decode loop (`loop.next_step`, with the
default drafter and draft length, asked for nothing) is measured in the same rounds: what it costs
more than the forward alone is the loop's own work (choosing the draft length, the drafter's
look-up, verification, bookkeeping, Python), reported as its share of the step (`outside_forward`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from assistant.decoding.draft_length import AdaptiveDraftLength, FixedDraftLength
from assistant.decoding.drafters import Context, Drafter, NoDraft
from assistant.decoding.loop import Generation, forward, next_step, prefill
from assistant.decoding.verification import Sampling
from assistant.model.exactness import PROMPT_ROWS, STEP_ROWS, fixed_shapes, padded
from assistant.model.kv_cache import preallocated_cache

CONTEXT = 1500  # tokens before the measured steps
VERIFY = 16  # rows of the measured verification
STEP_REPEATS = 5
PREFILL_REPEATS = 2  # a 1,500-token prefill of a 1.5B model takes 10-20 s on 2 cores
IDLE = 0.05  # s before each measurement: OpenMP threads may spin for milliseconds after their work, and
# where the engine's did, llama.cpp's verification right after it took 12% longer (294 against 263 ms)


@dataclass
class StepCosts:
    context: int
    prefill_seconds: float
    step_seconds: float
    verify_seconds: float
    loop_step_seconds: float | None = None  # a one-token step of the decode loop, its forward and all around it

    def as_dict(self) -> dict:
        outside = None if self.loop_step_seconds is None else 1 - self.step_seconds / self.loop_step_seconds
        return {**asdict(self), "verify_over_step": self.verify_seconds / self.step_seconds,
                "outside_forward": outside}


def context_ids(tokenizer, texts: list[str], most: int) -> list[int]:
    """`CONTEXT` token ids of real text (fewer where the model's context is shorter): `texts`, one after
    another, repeated as needed."""
    ids = tokenizer("\n\n".join(texts)).input_ids
    wanted = min(CONTEXT, most - VERIFY - 1)
    return (ids * (wanted // len(ids) + 1))[:wanted]


def best_of(measure, repeats: int) -> dict[str, float]:
    """The fastest of `repeats` runs of `measure() -> {name: seconds}`, name by name."""
    runs = [measure() for _ in range(repeats)]
    return {name: min(run[name] for run in runs) for name in runs[0]}


def timed(work) -> float:
    time.sleep(IDLE)
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def measure(engines: dict[str, Engine | LlamaCpp]) -> dict[str, StepCosts]:
    """Each engine's costs after its context: prefills, then one-token steps and verifications, each
    the fastest of rounds in which the engines take turns."""
    prefill = best_of(lambda: {name: e.prefill() for name, e in engines.items()}, PREFILL_REPEATS)
    steps = best_of(lambda: {f"{name} {kind}": e.run(kind) for name, e in engines.items() for kind in e.KINDS},
                    STEP_REPEATS)
    for e in engines.values():
        e.reset()
    return {name: StepCosts(len(e.ids), prefill[name], steps[f"{name} step"], steps[f"{name} verify"],
                            steps.get(f"{name} loop")) for name, e in engines.items()}


class Engine:
    """The engine's forward (the weights `model` was loaded with), as `ar` and verification run it: where
    its shapes are fixed (`exactness.fixed_shapes`), a step is padded to STEP_ROWS rows and the prefill
    goes in chunks of PROMPT_ROWS; and a one-token step of its decode loop with `drafter` and
    `draft_length`."""

    KINDS = ("step", "verify", "loop")

    def __init__(self, model, ids: list[int], drafter: Drafter = NoDraft(),
                 draft_length: AdaptiveDraftLength | FixedDraftLength = FixedDraftLength(0)):
        self.model, self.ids, self.drafter, self.draft_length = model, ids, drafter, draft_length
        self.rows = STEP_ROWS[model.device.type] if fixed_shapes(model) else None
        self.capacity = padded(len(ids), PROMPT_ROWS) + max(VERIFY, self.rows or 0)
        self.cache = preallocated_cache(model, self.capacity)
        self.sync = torch.cuda.synchronize if model.device.type == "cuda" else lambda: None

    def prefill(self) -> float:  # leaves the context in the cache
        self.cache.reset()
        context = Context.start(self.ids, self.capacity, (), 0, self.model.dtype, self.model.device, self.cache)
        return timed(lambda: (prefill(self.model, self.ids, context, None), self.sync()))

    def run(self, kind: str) -> float:  # a step or a verification after the context, which it leaves as it was
        if kind == "loop":
            return self.loop_step()
        tokens = self.ids[:1 if kind == "step" else VERIFY]
        fed = tokens + tokens[-1:] * ((self.rows or len(tokens)) - len(tokens))
        seconds = timed(lambda: (forward(self.model, fed, self.cache, False, len(fed)), self.sync()))
        self.cache.crop(-len(fed))
        return seconds

    def loop_step(self) -> float:
        """A one-token step of the decode loop (`loop.next_step`, one token left to make, so the drafter is
        asked for none) after the context, which it leaves as it was."""
        ids = self.ids + self.ids[-1:]  # the context fed, and the token the step feeds
        context = Context.start(ids, self.capacity, self.drafter.layers, self.model.config.get_text_config().hidden_size,
                                self.model.dtype, self.model.device, self.cache)
        generation = Generation(context, self.drafter, self.draft_length, self.rows or 1, 1, Sampling(),
                                torch.Generator(), [None] * len(ids))
        seconds = timed(lambda: (next_step(self.model, generation), self.sync()))
        self.cache.crop(-1)
        return seconds

    def reset(self) -> None:
        self.cache.reset()


class LlamaCpp:
    """llama.cpp's forward (llama-cpp-python's `Llama`), in batches of its `n_batch` as `Llama.eval` runs;
    its verification asks for the logits of every row."""

    KINDS = ("step", "verify")

    def __init__(self, llama, ids: list[int]):
        self.llama, self.ids = llama, ids

    def decode(self, tokens: list[int], past: int, all_logits: bool) -> float:
        def work():
            self.llama._ctx.kv_cache_seq_rm(-1, past, -1)
            for start in range(0, len(tokens), self.llama.n_batch):
                self.llama._batch.set_batch(batch=tokens[start:start + self.llama.n_batch], n_past=past + start,
                                            logits_all=all_logits)
                self.llama._ctx.decode(self.llama._batch)
        return timed(work)

    def prefill(self) -> float:
        return self.decode(self.ids, 0, False)

    def run(self, kind: str) -> float:
        return self.decode(self.ids[:1], len(self.ids), False) if kind == "step" else \
            self.decode(self.ids[:VERIFY], len(self.ids), True)

    def reset(self) -> None:
        self.llama.reset()
