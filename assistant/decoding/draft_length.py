"""How many tokens to draft at each step.

A draft of k tokens costs one forward pass over k+1 tokens and gains the accepted prefix plus
one token. With a per-token acceptance rate a (acceptance stops at the first miss), a draft of
k yields (1 - a^(k+1)) / (1 - a) tokens on average, so the best k maximises that over the
measured cost of a (k+1)-token forward. The cost curve is measured once per model, weights,
device and thread count (cached on disk in the cache the model was loaded from, or in memory where
there is none or it cannot be written; a damaged file is measured again), in the background on a first start; a is tracked online per
generation. Where little is accepted (translation, answers to questions) k drops to 0 and
decoding is plain decoding.

A rewrite copies in long runs, so a is high and changes by regime (a copied stretch, then an edit):
the estimate starts high (`prior`) and follows the last drafts closely. The two weights were chosen by
replaying recorded drafts under each setting, priced by a measured cost curve (docs/kernels.md has the
measurement).

Long drafts: a draft is chosen up to the model's tuned ceiling; while drafts are accepted whole as
long as they were chosen (the copied source goes on), the reach doubles, up to `longest`, and a miss
brings it back to the ceiling. The choice over the longer range is the same gain, so a draft grows
only while expected accepted tokens per second still rise with its length. The reach grows after
whole drafts shorter than the ceiling too: where the cost curve has a step (the 1.5B on AMX: 17 rows
cost about what 32 do), the best draft below the ceiling is short of the step, and only a reach past
it shows that 64 rows make more tokens per second than 16. Its cost is
measured, not extrapolated: the curve goes to 64 rows, the most one forward takes
(`exactness.longest_draft`: past `exactness.FEW` rows a forward leaves the row-exact paths, so a
longer draft would have to be verified in several forwards, which cost what successive steps cost).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from assistant import files
from assistant.model import loading, weights
from assistant.model.kv_cache import preallocated_cache

COST_SIZES = (1, 2, 4, 8, 16, 32, 64)
MEASURED: dict[tuple[Path | None, str], dict[int, float]] = {}  # this process's measurements, by cache and key


@dataclass
class FixedDraftLength:
    k: int

    @property
    def most(self) -> int:
        return self.k

    def choose(self) -> int:
        return self.k

    def update(self, drafted: int, accepted: int) -> None:
        pass


@dataclass
class AdaptiveDraftLength:
    """Invariant: a chosen draft is at most `reach`, which is `ceiling` but after drafts accepted whole as
    long as they were chosen, and never more than `most` (the module docstring says why and how it grows)."""

    costs: dict[int, float]  # forward time of n tokens relative to one token
    ceiling: int  # the most a draft is chosen at until drafts at it are accepted whole
    longest: int = 0  # the most a draft may grow to while accepted whole (not above `ceiling`: no growth)
    prior: float = 0.98  # acceptance expected of a rewrite before any draft is seen
    memory: float = 0.3  # weight of the past in the running acceptance estimate
    patience: float = 0.95  # per undrafted step: how slowly the estimate returns to the prior

    def __post_init__(self):
        self.acceptance = self.prior
        self.reach = self.ceiling
        self.chosen = 0  # the last draft length chosen
        self.priced = [self.cost(k + 1) for k in range(self.most + 1)]  # each draft's forward, priced once

    @property
    def most(self) -> int:
        return max(self.ceiling, self.longest)

    def cost(self, tokens: int) -> float:
        sizes = sorted(self.costs)
        below = max((s for s in sizes if s <= tokens), default=sizes[0])
        above = min((s for s in sizes if s >= tokens), default=sizes[-1])
        if above == below:
            return self.costs[below] * tokens / below if tokens > below else self.costs[below]
        share = (tokens - below) / (above - below)
        return self.costs[below] + share * (self.costs[above] - self.costs[below])

    def choose(self) -> int:
        """The draft length of most expected tokens per unit of cost, the shortest on ties. Every step of
        every strategy asks, so the costs are priced once (`priced`): interpolating them here took a
        fifth of a one-token step of the tiny test model (`step_costs`' loop step)."""
        a = min(self.acceptance, 0.999)
        gains = [(1 - a ** (k + 1)) / (1 - a) / self.priced[k] for k in range(self.reach + 1)]
        self.chosen = gains.index(max(gains))
        return self.chosen

    def update(self, drafted: int, accepted: int) -> None:
        if 0 < self.chosen <= drafted == accepted:  # whole, and not cut short by its source or the tokens left
            self.reach = min(2 * self.reach, self.most)
        elif accepted < drafted:
            self.reach = self.ceiling
        if drafted == 0:
            # Without drafts nothing is learnt, so drift back towards the prior: the text may
            # have come back to copying, and a later probe will tell.
            self.acceptance = self.patience * self.acceptance + (1 - self.patience) * self.prior
            return
        trials = accepted + (accepted < drafted)  # acceptance stops at the first miss
        self.acceptance = self.memory * self.acceptance + (1 - self.memory) * accepted / trials


# Until this machine's curve is measured: between the AVX2 float32 curve (1.46x for 2 tokens ... 4.27x for 32)
# and the fbgemm float16 one (1.09x for 4 tokens, 3.0x for 16), so drafting starts cautious but not off; 64 rows
# carry on the slope from 16 to 32 (both curves grow about linearly there).
PRIOR = {1: 1.0, 2: 1.2, 4: 1.5, 8: 2.0, 16: 3.0, 32: 4.5, 64: 7.5}
FLAT = {n: 1.0 for n in COST_SIZES}  # where every step is padded to the same rows (`exactness.fixed_shapes`)
CONTEXT = 256  # tokens before the measured forwards, prefilled in chunks of this many
CHUNK = 64
FORWARD = 6  # in the cache key; raised when the forward's speed changes (2: attention.few_queries; 3: its kernel,
# decoder; 4: weights.products, attention.projected; 5: the kernel's bfloat16 build; 6: its bfloat16 cache)


def costs_key(loaded: loading.LoadedModel) -> str:
    """What the curve is measured for: the model, forward, weights (those on a kernel of ours with its
    source: a changed kernel has another curve), attention's precision, device and threads."""
    kernel = f"-{weights.KERNELS[loaded.weights].stamp()[:8]}" if loaded.weights in weights.KERNELS else ""
    key = (f"{loaded.name}-{loaded.sha256 or 'local'}"[:48] + f"-f{FORWARD}-{loaded.weights}{kernel}"
           f"-{loaded.model.config._attn_implementation}-{loaded.attention}-{loaded.device.type}"
           f"-{torch.get_num_threads()}t")
    return key.replace("/", "--")


def costs_path(loaded: loading.LoadedModel) -> Path | None:
    """Where the curve is cached: in the model's cache; None for a model loaded without one."""
    return None if loaded.cache is None else loaded.cache / "costs" / f"{costs_key(loaded)}.json"


def cached_costs(loaded: loading.LoadedModel) -> dict[int, float] | None:
    """The curve measured earlier on this machine (in this process where the cache is read-only), or
    None: never measured, or a damaged file, which is measured again rather than trusted."""
    path = costs_path(loaded)
    kept = MEASURED.get((loaded.cache, costs_key(loaded)))
    return kept or (None if path is None else valid_costs(files.read_json(path)))


def valid_costs(saved) -> dict[int, float] | None:
    """Costs read back from the cache, or None unless they are a relative cost for every size."""
    try:
        costs = {int(n): float(c) for n, c in saved.items()}
    except (AttributeError, TypeError, ValueError):
        return None
    return costs if set(costs) == set(COST_SIZES) and all(0 < c < float("inf") for c in costs.values()) else None


def measure_costs(loaded: loading.LoadedModel, turn=contextlib.nullcontext,
                  cancel: threading.Event | None = None) -> dict[int, float] | None:
    """Relative cost of a forward over n tokens after a 256-token context; saved for the next start.

    Every forward runs inside `turn()`, so a caller can interleave real work between them (the
    engine measures in the background, one forward per turn in its request queue). Once `cancel`
    is set no forward starts, nothing is saved, and None is returned.
    """
    stopped = lambda: cancel is not None and cancel.is_set()  # noqa: E731
    model = loaded.model
    cache = preallocated_cache(model, CONTEXT + max(COST_SIZES))
    ids = lambda n: torch.ones(1, n, dtype=torch.long, device=model.device)  # noqa: E731
    with torch.inference_mode():
        for _ in range(CONTEXT // CHUNK):
            with turn():
                if stopped():
                    return None
                model(input_ids=ids(CHUNK), cache=cache)
        seconds = {n: float("inf") for n in COST_SIZES}
        for _ in range(7):  # sizes interleaved and the fastest run kept: robust to other load
            for n in COST_SIZES:
                with turn():
                    if stopped():
                        return None
                    started = time.perf_counter()
                    model(input_ids=ids(n), cache=cache, logits_to_keep=n)
                    if model.device.type == "cuda":
                        torch.cuda.synchronize()
                    seconds[n] = min(seconds[n], time.perf_counter() - started)
                cache.crop(-n)
    costs = MEASURED[loaded.cache, costs_key(loaded)] = {n: seconds[n] / seconds[1] for n in COST_SIZES}
    if (path := costs_path(loaded)) is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            files.write_atomically(path, json.dumps(costs).encode())
        except OSError:
            pass  # a read-only cache: kept in memory for this process
    return costs
