"""What one forward costs, in `assistant bench`: the engine's against llama.cpp's, in the same run.

End-to-end tokens/s mixes the prefill, the draft acceptance and the cost of a forward; issue 13's
targets are about the last two apart: a one-token step and a 16-token verification after a
1,500-token context, and the 1,500-token prefill itself. Both engines are fed the same real token
ids (the bench records' text), with the same threads, each best of a few runs interleaved, so
that other load on the machine hurts them alike. llama.cpp's verification asks for the logits of
all 16 rows, as the engine's does (its plain decoding asks only for the last row's).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from ..decoding import forward
from ..kv_cache import preallocated_cache

CONTEXT = 1500  # tokens before the measured steps
VERIFY = 16  # rows of the measured verification
STEP_REPEATS = 5
PREFILL_REPEATS = 2  # a 1,500-token prefill of a 1.5B model takes 10-20 s on 2 cores


@dataclass
class StepCosts:
    context: int
    prefill_seconds: float
    step_seconds: float
    verify_seconds: float

    def as_dict(self) -> dict:
        return {**asdict(self), "verify_over_step": self.verify_seconds / self.step_seconds}


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
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def engine(model, ids: list[int]) -> StepCosts:
    """The engine's forward (the weights `model` was loaded with), as `ar` and verification run it."""
    cache = preallocated_cache(model, len(ids) + VERIFY)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else lambda: None

    def run(tokens: list[int]) -> float:  # after the context, which it leaves as it was
        seconds = timed(lambda: (forward(model, tokens, cache, False, len(tokens)), sync()))
        cache.crop(-len(tokens))
        return seconds

    def fill() -> dict[str, float]:
        cache.reset()
        return {"prefill": timed(lambda: (forward(model, ids, cache, False, 1), sync()))}

    prefill = best_of(fill, PREFILL_REPEATS)
    steps = best_of(lambda: {"step": run(ids[:1]), "verify": run(ids[:VERIFY])}, STEP_REPEATS)
    cache.reset()
    return StepCosts(len(ids), prefill["prefill"], steps["step"], steps["verify"])


def llama_cpp(llama, ids: list[int]) -> StepCosts:
    """llama.cpp's forward (llama-cpp-python's `Llama`), in batches of its `n_batch` as `Llama.eval` runs."""

    def run(tokens: list[int], past: int, all_logits: bool) -> float:
        def decode():
            llama._ctx.kv_cache_seq_rm(-1, past, -1)
            for start in range(0, len(tokens), llama.n_batch):
                llama._batch.set_batch(batch=tokens[start:start + llama.n_batch], n_past=past + start,
                                       logits_all=all_logits)
                llama._ctx.decode(llama._batch)
        return timed(decode)

    prefill = best_of(lambda: {"prefill": run(ids, 0, False)}, PREFILL_REPEATS)
    steps = best_of(lambda: {"step": run(ids[:1], len(ids), False), "verify": run(ids[:VERIFY], len(ids), True)},
                    STEP_REPEATS)
    llama.reset()
    return StepCosts(len(ids), prefill["prefill"], steps["step"], steps["verify"])
