"""Generations decoded side by side: each round verifies the next draft of every running generation in one forward.

Invariant: each generation's tokens are the ones `loop.decode` makes of it alone, token for token: it drafts,
verifies and accepts as `loop.next_step` does, its draft perhaps cut shorter to suit the round (`allotted`), and
its rows in a round's forward get the bits a forward of its own rows gives them (`model.side_by_side`). A cut
moves a step's end, so a token drafted alone may come as the model's own here, attributed to the copy it
continues or to none. Why: on a CPU a forward of a few rows costs about what one row does (the
weights are read once for all), so generations that make a token a step, such as docstrings, each new text, go
about as many times faster side by side.

A generation is added with how to start it (`loop.begin`, its prompt prefilled) and how its steps are consumed
(the engine turns them into events); reading its outputs drives the rounds. Generations join in the order they
were added, up to `width` at once, the one being read first; each is prefilled alone as it joins. When a round
makes steps for generations not being read, their consumers take them at once and their outputs wait until they
are read; a consumer that closes its steps (the engine's pass does once its answer has reached its end) ends its
generation before another round. A generation's seconds are its prefill, an equal share of every round it ran
in, and its consumer's time taking steps while another was read.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from assistant.decoding.draft_length import AdaptiveDraftLength, FixedDraftLength
from assistant.decoding.loop import Generation, Step, accept, draft_size, fed_rows, forward, settled
from assistant.model import exactness, side_by_side, transformer

END = object()  # a consumer's end, among its outputs


@dataclass(eq=False)
class Member:
    """One generation of a lockstep: how it starts, its state once started, the steps and outputs not yet read."""

    start: Callable[[], Generation]
    cancel: threading.Event | None
    generation: Generation | None = None
    steps: deque = field(default_factory=deque)
    outputs: deque = field(default_factory=deque)
    consumer: Iterator | None = None
    seconds: float = 0.0  # its prefill and its share of the rounds it ran in
    finished: bool = False  # no more steps: it ended, was cancelled, or its consumer stopped reading
    error: BaseException | None = None  # what its consumer raised while it was not being read

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()


class Lockstep:
    """Generations on one model decoded side by side, up to `width` at once."""

    def __init__(self, model, width: int):
        self.model, self.width = model, width
        self.pending: deque[Member] = deque()
        self.running: list[Member] = []

    @staticmethod
    def takes(model) -> bool:
        """Whether `model`'s forward takes several sequences' rows (`side_by_side`)."""
        return transformer.fits(model) and not exactness.fixed_shapes(model)

    def add(self, start: Callable[[], Generation], consume: Callable[[Iterator[Step], Callable[[], float]], Iterator],
            cancel: threading.Event | None = None) -> Iterator:
        """Add a generation started by `start` and consumed by `consume(steps, clock)` (`clock`: the generation's
        seconds so far); returns the consumer's outputs, read in turn with the others'."""
        member = Member(start, cancel)
        member.consumer = consume(self._steps(member), lambda: member.seconds)
        self.pending.append(member)
        return self._outputs(member)

    def _outputs(self, member: Member) -> Iterator:
        """The member's outputs: those its consumer made while others were read, then its own, made as it is read
        (which drives the rounds); what its consumer raised meanwhile, raised after them."""
        try:
            while True:
                if member.outputs:
                    output = member.outputs.popleft()
                elif member.error is not None:
                    raise member.error
                else:
                    output = next(member.consumer, END)
                if output is END:
                    return
                yield output
        finally:
            member.consumer.close()
            self._leave(member)

    def _steps(self, member: Member) -> Iterator[Step]:
        """The member's steps, as its consumer reads them: those made already, else one more round's."""
        try:
            while member.steps or not member.finished:
                if not member.steps:
                    self._round(member)
                if member.steps:
                    yield member.steps.popleft()
        finally:
            self._leave(member)

    def _leave(self, member: Member) -> None:
        """The generation makes no more steps: its cache is freed."""
        member.finished, member.generation = True, None
        if member in self.running:
            self.running.remove(member)
        if member in self.pending:
            self.pending.remove(member)

    def _round(self, reader: Member) -> None:
        """One forward for the running generations, `reader` (the one being read) among them; the steps it makes
        for the others are taken by their consumers at once (`_take`)."""
        self._join(reader)
        if reader not in self.running:
            return
        started, members = time.perf_counter(), list(self.running)
        generations = [member.generation for member in members]
        drafts = allotted([g.drafter.propose(g.context, draft_size(g)) for g in generations],
                          [g.draft_length for g in generations], exactness.FEW)
        fed = [fed_rows(g.context, draft) for g, (draft, _) in zip(generations, drafts)]
        counts = [len(rows) for rows in fed]
        out = forward(self.model, [token for rows in fed for token in rows],
                      side_by_side.Sequences([g.context.cache for g in generations], counts),
                      any(g.drafter.layers for g in generations), sum(counts))
        first = 0
        for member, generation, (draft, origin), count in zip(members, generations, drafts, counts):
            rows = slice(first, first + count)
            first += count
            tokens = accept(generation.context, draft, out.logits[0, rows],
                            tuple(state[:, rows] for state in out.hidden_states or ()), count, generation.sampling,
                            generation.generator)
            member.steps.append(settled(generation, tokens, origin, len(draft), len(draft), started))
            if member.steps[-1].finished or generation.left <= 0:
                self._leave(member)
        shared = (time.perf_counter() - started) / len(members)
        for member in members:
            member.seconds += shared
            member.steps[-1].seconds = shared
        for member in members:
            if member is not reader:
                taking = time.perf_counter()
                self._take(member)
                member.seconds += time.perf_counter() - taking

    def _join(self, reader: Member) -> None:
        """Start `reader` if it waits, then those added after it while fewer than `width` run; a cancelled one
        finishes unstarted, and one whose cancel came while it ran leaves."""
        for member in [m for m in self.running if m.cancelled()]:
            self._leave(member)
        waiting = [reader] if reader in self.pending else []
        while waiting or (self.pending and len(self.running) < self.width):
            member = waiting.pop() if waiting else self.pending[0]
            self.pending.remove(member)
            if member.cancelled():
                member.finished = True
                continue
            started = time.perf_counter()
            member.generation = member.start()
            member.seconds += time.perf_counter() - started
            self.running.append(member)

    def _take(self, member: Member) -> None:
        """The generation's consumer takes the steps made for it, its outputs kept until read."""
        while member.steps and member.error is None:
            try:
                output = next(member.consumer, END)
            except Exception as error:  # noqa: BLE001 - raised where the member is read
                member.error = error
                return
            member.outputs.append(output)
            if output is END:
                return


def allotted(drafts: list[tuple[list[int], int]], lengths: list[AdaptiveDraftLength | FixedDraftLength],
             most: int) -> list[tuple[list[int], int]]:
    """The drafts cut to the rows that make the most expected tokens per unit of the round's cost, at most `most`.

    Each generation chose its draft as if it ran alone, yet every row of a round costs all of them: four one-token
    steps and two drafts of ten take 24 rows, which cost twice what 16 do where the cost curve has a step (AMX
    tiles of 16 rows). So the draft tokens are taken in the order of their chance of being accepted (a^i for the
    i-th token of a generation whose drafts are accepted at rate a, `lengths`' estimate), and the round keeps the
    count of rows at which its expected tokens over the cost of a forward of that many rows (the measured curve)
    is highest. A draft is cut from its end, so what it drafts first stays. Where a draft length is fixed (no rate
    is tracked), the drafts are only cut to `most` rows (`rows_within`)."""
    if not all(isinstance(length, AdaptiveDraftLength) for length in lengths):
        return rows_within(drafts, most)
    rates, cost = [min(length.acceptance, 0.999) for length in lengths], lengths[0].cost
    taken, rows, expected = [0] * len(drafts), len(drafts), float(len(drafts))
    best, kept = expected / cost(rows), list(taken)
    while rows < most:
        left = [i for i, (draft, _) in enumerate(drafts) if taken[i] < len(draft)]
        if not left:
            break
        chosen = max(left, key=lambda i: rates[i] ** (taken[i] + 1))
        taken[chosen], rows = taken[chosen] + 1, rows + 1
        expected += rates[chosen] ** taken[chosen]
        if expected / cost(rows) > best:
            best, kept = expected / cost(rows), list(taken)
    return [(draft[:length], origin) for (draft, origin), length in zip(drafts, kept)]


def rows_within(drafts: list[tuple[list[int], int]], most: int) -> list[tuple[list[int], int]]:
    """The drafts cut, the longest first, until they and a token each take at most `most` rows (a draft is cut
    from its end: what it drafts first stays)."""
    lengths = [len(draft) for draft, _ in drafts]
    while sum(lengths) + len(lengths) > most and max(lengths) > 0:
        lengths[lengths.index(max(lengths))] -= 1
    return [(draft[:length], origin) for (draft, origin), length in zip(drafts, lengths)]
