"""The local engine: `Assistant`, the `Engine` of engine/contract.py on a model loaded in this process.

    assistant = Assistant("qwen2.5-coder-1.5b", strategy="pld+h", weights="auto")
    for event in assistant.rewrite(document, "fix the bug"):
        ...  # Queued, Delta (one per decoding step, with the running figures), then one Result
    result = assistant.rewrite_text(document, "fix the bug")
    events = assistant.run(Request(document, "fix the bug", selection=(0, 120), max_new_tokens=200))

The keywords of `rewrite` are the fields of `Request`; a front door checks what it can before
the model loads with `check_request`, `check_instruction` and `check_strategy` (engine/contract.py),
which raise the RewriteError the engine itself would.

A request's way: `run` checks it once and hands it to `repair.checked`, which asks `answer` for the
answer and again for each repair pass; `answer` plans it (one `_pass`, or pieces), and `_start`
decodes a pass in the model's turn (`_generate`, the loop of decoding/loop.py).

A document (or selection) too long for one pass is split and rewritten piece by piece here
(engine/long_documents.py), so every front door gets the same plan and the same output
budget (`answer_budget`); the Result's `stopped` says "length" or "cancelled" if any piece
did not finish. An edit that asks every definition of a Python text for a docstring or type
hints is made one definition at a time (engine/definitions.py), its passes sharing the prompt
prefix that shows the whole file and decoded side by side, each step of several passes one forward
(decoding/lockstep.py); the Result's `definitions` says how each went.

A finished answer is checked once for problems the edit introduced, in the request's `language`,
and repaired with up to `repairs` further passes while problems remain (engine/repair.py): the
Result carries the check, the repairs made, and the text kept.

One generation runs at a time per loaded model; others wait their turn in arrival order and
see their place in the queue as `Queued` events.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
import weakref
from collections import Counter, deque
from contextlib import closing, contextmanager
from functools import partial
from typing import Callable, Generator, Iterator

import numpy as np

from assistant import config
from assistant.decoding import draft_length
from assistant.decoding.draft_length import AdaptiveDraftLength
from assistant.decoding.drafters import AttentionDraft, Drafter, HiddenDraft, NgramDraft, NoDraft
from assistant.decoding.lockstep import Lockstep
from assistant.decoding.loop import Sampling, Step, begin, decode, warm
from assistant.decoding.prefix_cache import PrefixCache, common_prefix
from assistant.engine import definitions, long_documents, repair
from assistant.engine.contract import (
    DEFAULT_REPAIRS,
    DEFAULT_STRATEGY,
    Engine,
    Request,
    RewriteError,
    check_decoding,
    check_repairs,
    check_request,
    check_strategy,
)
from assistant.engine.events import Delta, Event, Queued, Result, Stats
from assistant.engine.long_documents import answer_budget
from assistant.engine.output import OutputText, Span, merge_spans, missing_final_newline
from assistant.engine.prompts import Prompt, Segment, build_prompt, definition_prompt, edit_prompt, text_prompt
from assistant.model import loading, tuning
from assistant.model.exactness import fixed_shapes, longest_draft

WARM_CHUNK = 32  # tokens per background prefill forward: about 0.6 s on Qwen2.5-Coder-1.5B, 2 AVX2 cores
CHAT_BUDGET = 512

log = logging.getLogger("assistant")


class TurnQueue:
    """A first-come, first-served lock that can tell a waiter how many are ahead of it."""

    def __init__(self):
        self._changed = threading.Condition()
        self._line: deque[object] = deque()

    def wait(self, ticket: object, cancel: threading.Event | None) -> Iterator[int]:
        """Join the line and yield the number ahead each time it changes; return when it is our turn."""
        with self._changed:
            self._line.append(ticket)
        reported = None
        while True:
            with self._changed:
                ahead = self._line.index(ticket)
                if ahead == 0 or (cancel is not None and cancel.is_set()):
                    return
                if ahead != reported:
                    reported = ahead
                else:
                    self._changed.wait(timeout=0.2)
                    continue
            yield ahead

    def leave(self, ticket: object) -> None:
        with self._changed:
            if ticket in self._line:
                self._line.remove(ticket)
            self._changed.notify_all()


class Closed(RuntimeError):
    """The assistant was closed: it runs nothing on its model any more."""


class Forwards:
    """The work running on one model, so that closing can refuse more and wait for what is in progress: a
    process that exits while a thread is inside torch aborts ("terminate called without an active exception",
    SIGABRT), and freeing a tensor is inside torch. Work counts, by thread, from `running()` until it leaves,
    and it leaves holding no tensor: the frames an exception carries out are cleared first. Once closed,
    `running()` raises Closed."""

    def __init__(self):
        self.closed = threading.Event()
        self._changed = threading.Condition()
        self._running: Counter[int] = Counter()  # thread -> work it runs, for threads that run any

    @contextmanager
    def running(self) -> Iterator[None]:
        thread = threading.get_ident()
        with self._changed:
            if self.closed.is_set():
                raise Closed("the assistant is closed")
            self._running[thread] += 1
        try:
            yield
        except BaseException as error:
            traceback.clear_frames(error.__traceback__)  # their tensors are freed now, not after close()
            raise
        finally:
            with self._changed:
                self._running[thread] -= 1
                if not self._running[thread]:
                    del self._running[thread]
                self._changed.notify_all()

    def steps(self, events: Generator[Event, None, None]) -> Iterator[Event]:
        """`events`, each made while running: a generation's forwards run while its next event is made,
        and once closed, its generator is closed (its tensors freed) before its last step leaves."""
        while True:
            with self.running():
                event = next(events, None)
                if self.closed.is_set():
                    events.close()
                    raise Closed("the assistant is closed")
            if event is None:
                return
            yield event

    def close(self) -> None:
        """Refuse more work and wait for the work other threads run to leave: a generation's step, or
        background work, which stops at its next turn. The closing thread runs no forward while it closes, so
        what it still counts was cut short by a KeyboardInterrupt between counting and leaving (a signal's
        exception lands on any line of the main thread), and is not waited for: that would be for ever."""
        closing = threading.get_ident()
        with self._changed:
            self.closed.set()
            self._changed.wait_for(lambda: set(self._running) <= {closing})


class Assistant(Engine):
    """A loaded model that rewrites. `draft_ceiling` bounds the adaptive draft length (None: the
    model's tuned value), past which drafts grow while accepted whole with `long_drafts` (up to
    `exactness.longest_draft`); `prefix_cache_mb` bounds the prompt prefixes kept for reuse (0: none);
    `repairs` is the most repair passes an answer gets unless its request says (0: none); `branches` is how
    many best-ranked candidates' continuations a greedy step verifies together as a token tree (1: one
    chain, the default until a quiet machine measures the tree faster; `decoding.tree`); `side_by_side` is how many
    passes of an edit made definition by definition are decoded at once, each step of all of them one forward (1:
    one after the other; `decoding.lockstep`); `attention` is the precision of attention's products (auto,
    float32 or bfloat16; `model.attention.use`)."""

    def __init__(self, model: str | None = None, *, strategy: str = DEFAULT_STRATEGY, weights: str | None = None,
                 device: str = "auto", prefix_cache_mb: int | None = None, draft_ceiling: int | None = None,
                 repairs: int = DEFAULT_REPAIRS, long_drafts: bool = True, branches: int = 1, side_by_side: int = 4,
                 attention: str | None = None):
        settings = config.settings()
        self.strategy = check_strategy(strategy)
        self.repairs = check_repairs(repairs)
        self.model = model or settings.model
        self.loaded = loading.load(self.model, weights or settings.weights, settings.cache, device,
                                   attention or settings.attention)
        self.tuned = tuning.tuned(self.loaded)
        self.draft_ceiling = self.tuned.draft_tokens if draft_ceiling is None else draft_ceiling
        self.longest_draft = longest_draft(self.loaded.model) if long_drafts else 0
        if branches < 1:
            raise ValueError(f"branches must be at least 1, not {branches}")
        self.branches = branches
        if side_by_side < 1:
            raise ValueError(f"side_by_side must be at least 1, not {side_by_side}")
        self.side_by_side = side_by_side
        self.reuse_prefixes(settings.prefix_cache_mb if prefix_cache_mb is None else prefix_cache_mb)
        self._queue = TurnQueue()
        # Measured once per machine, then read; a padded step costs the same whatever its draft.
        self.forward_costs = draft_length.FLAT if fixed_shapes(self.loaded.model) else draft_length.cached_costs(
            self.loaded)
        self._measuring = None
        self._forwards = Forwards()
        weakref.finalize(self, self._forwards.close)  # at exit too, for a caller that never closes
        if self.forward_costs is None:
            self.forward_costs = draft_length.PRIOR
            log.info("measuring this machine's forward costs in the background (once per model and weights)")
            self._measuring = threading.Thread(target=self._measure_costs, name="forward-costs", daemon=True)
            self._measuring.start()

    def reuse_prefixes(self, megabytes: int) -> None:
        """From now on, reuse recent prompt prefixes kept in a fresh cache of `megabytes` (0: no reuse)."""
        self.prefixes = PrefixCache(megabytes << 20) if megabytes > 0 else None

    def _measure_costs(self) -> None:
        try:
            with self._forwards.running():
                costs = draft_length.measure_costs(self.loaded, self._background_turn, self._forwards.closed)
        except Closed:
            return
        self.forward_costs = costs or self.forward_costs

    def close(self) -> None:
        """Stop background work and wait for the forward in progress, if any; a generation still streaming
        raises Closed at its next step. A process that exits while a thread is inside torch aborts
        (SIGABRT), so an assistant never closed is closed at exit."""
        self._forwards.close()

    @contextmanager
    def _background_turn(self):
        """One forward of background work, in turn with requests: a request waits for one at most."""
        ticket = object()
        try:
            for _ in self._queue.wait(ticket, self._forwards.closed):
                pass
            if self._forwards.closed.is_set():
                raise Closed("the assistant is closed")
            yield
        finally:
            self._queue.leave(ticket)

    def warm(self, document: str, cancel: threading.Event | None = None) -> int:
        """Prefill, at low priority, what every rewrite prompt of `document` shares whatever the instruction
        (the chat start and the fenced document), into the prefix cache, so that the first rewrite of
        an idle buffer starts without it. Each forward of WARM_CHUNK tokens is one turn in the request
        queue: a request waits for one at most. Returns the prompt tokens now cached (0 once closed)."""
        try:
            first, second = (self.prompt(document, instruction).ids for instruction in ("Fix it.", "Rewrite this."))
        except RewriteError:  # nothing a rewrite could start from: an empty or binary buffer
            return 0
        shared = first[:common_prefix(np.asarray(first), np.asarray(second))]
        if self.prefixes is None or len(shared) > self.loaded.context_length // 2:
            return 0  # a buffer this long is rewritten in pieces, whose prompts differ
        try:
            with self._forwards.running():
                return warm(self.loaded.model, shared, self.drafter(self.strategy).layers, self.prefixes, WARM_CHUNK,
                            self._background_turn, cancel)
        except Closed:
            return 0

    def measured_costs(self) -> dict[int, float]:
        """The forward-cost curve, waiting for the background measurement if one is running."""
        if self._measuring is not None:
            self._measuring.join()
        return self.forward_costs

    def adaptive_length(self) -> AdaptiveDraftLength:
        """A generation's adaptive draft length: this machine's cost curve, the ceiling, the longest draft."""
        return AdaptiveDraftLength(self.forward_costs, self.draft_ceiling, self.longest_draft)

    def drafter(self, strategy: str) -> Drafter:
        if strategy == "ar":
            return NoDraft()
        if strategy == "pld":
            return NgramDraft()
        if strategy == "pld+h":
            return HiddenDraft(self.tuned.hidden_layer)
        return AttentionDraft(self.loaded.model, self.tuned.heads[:self.tuned.head_count])

    def prompt(self, document: str, instruction: str, selection: tuple[int, int] | None = None,
               references: tuple[str, ...] = ()) -> Prompt:
        """The edit prompt of a request with these fields, checked as `run` checks a request."""
        check_request(Request(document, instruction, selection, references))
        return edit_prompt(self.loaded.tokenizer, instruction, document, selection, references)

    def chat_prompt(self, question: str, history: tuple[dict, ...] = ()) -> Prompt:
        """The prompt of a plain chat turn after `history`; attribution points into `question`."""
        if not isinstance(question, str) or not question.strip():
            raise RewriteError("the question is empty")
        return build_prompt(self.loaded.tokenizer, [Segment(question, 0)], system=None, history=history)

    def count_tokens(self, text: str) -> int:
        return len(self.loaded.tokenizer(text, add_special_tokens=False)["input_ids"])

    def budget(self, prompt: Prompt, rewritten: str | None, more: int = 0) -> int:
        """The most new tokens an answer to `prompt` gets unless the request says otherwise: room for a whole
        rewrite of the text `rewritten` (`answer_budget`) and `more`, or CHAT_BUDGET for a chat turn (None),
        within the model's context."""
        wanted = CHAT_BUDGET if rewritten is None else answer_budget(self.count_tokens(rewritten)) + more
        return max(1, min(self.loaded.context_length - len(prompt.ids), wanted))

    @property
    def context_length(self) -> int:
        return self.loaded.context_length

    @property
    def weights(self) -> str:
        return self.loaded.weights

    def run(self, request: Request, cancel: threading.Event | None = None) -> Iterator[Event]:
        """Stream the rewrite of the request's document (or of its selection) as events.

        A text too long for one pass is rewritten in pieces, `max_new_tokens` applying to each; the
        events read as one rewrite of the whole. A finished answer is checked, and repaired while it
        has problems (a Repairing event before each repair pass, whose steps are not streamed). A bad
        request raises RewriteError here, before anything runs; closing the returned iterator early
        releases the model for the next request.
        """
        check_request(request)
        return repair.checked(self, request, self.repairs if request.repairs is None else request.repairs, cancel)

    def answer(self, request: Request, cancel: threading.Event | None = None) -> Iterator[Event]:
        """The answer to a checked request, unchecked: one pass per definition for an edit that asks each
        definition of a Python text for something (engine/definitions.py), else in one pass, or in pieces for
        a long text."""
        region = request.selection or (0, len(request.document))
        by_definition = self._by_definition(request, region, cancel)
        if by_definition is not None:
            return by_definition
        pieces = long_documents.plan(request.document, region, context_length=self.loaded.context_length,
                                     count_tokens=self.count_tokens,
                                     prompt_tokens=lambda part: len(self._prompt(request, part).ids),
                                     max_piece_tokens=request.max_piece_tokens)
        if pieces == [region]:
            return self._pass(request, request.selection, cancel)
        return long_documents.rewrite(request.document, region, pieces,
                                      lambda part: self._pass(request, part, cancel), cancel)

    def _by_definition(self, request: Request, region: tuple[int, int],
                       cancel: threading.Event | None) -> Iterator[Event] | None:
        """The answer made one definition at a time, or None where it is not made so: the plan says no, the
        request asks for one pass or has stop strings (one would cut a definition short), or the largest
        definition's prompt (either pass's) and answer would not fit the context (the text is then planned as
        any other)."""
        wanted = request.by_definition and not request.stop
        planned = wanted and definitions.plan(request.document, region, request.instruction, request.language)
        if not planned:
            return None
        sizes = [self.count_tokens(request.document[slice(*part.span)]) for part in planned.parts]
        if sizes:
            largest = planned.parts[sizes.index(max(sizes))]
            wanted = request.max_new_tokens or answer_budget(max(sizes)) + planned.room
            prompt = max(len(self._definition_prompt(request, largest.span, said).ids) for said in (None, largest.sharper))
            if prompt + wanted > self.loaded.context_length:
                return None
        # The passes share the file's prefix: with reuse across requests off, they still reuse it among themselves.
        shared = self.prefixes if self.prefixes is not None else PrefixCache(sys.maxsize, entries=1)
        lockstep = Lockstep(self.loaded.model, self.side_by_side) if self.side_by_side > 1 and Lockstep.takes(
            self.loaded.model) else None

        def one_pass(part: definitions.Part, sharper: str | None) -> Iterator[Event]:
            return self._start(self._definition_prompt(request, part.span, sharper), request, part.span, cancel, shared,
                               planned.room, part.rest, lockstep)

        first = {part.span: one_pass(part, None) for part in planned.parts} if lockstep else {}  # side by side from now
        return definitions.rewrite(
            request.document, region, planned,
            lambda part, sharper: (first.pop(part.span, None) if sharper is None else None) or one_pass(part, sharper),
            cancel, (self.model, self.loaded.weights))

    def _definition_prompt(self, request: Request, part: tuple[int, int], instruction: str | None = None) -> Prompt:
        """The prompt of a pass over the definition at `part`, asked `instruction` (None: the request's)."""
        return definition_prompt(self.loaded.tokenizer, instruction or request.instruction, request.document, part,
                                 request.references)

    def _prompt(self, request: Request, part: tuple[int, int] | None) -> Prompt:
        return edit_prompt(self.loaded.tokenizer, request.instruction, request.document, part, request.references)

    def _pass(self, request: Request, part: tuple[int, int] | None, cancel: threading.Event | None) -> Iterator[Event]:
        """One pass rewriting `part` of the document (None: all of it)."""
        return self._start(self._prompt(request, part), request, part or (0, len(request.document)), cancel)

    def chat(self, question: str, *, history: tuple[dict, ...] = (), cancel: threading.Event | None = None,
             **options) -> Iterator[Event]:
        """Answer a plain chat turn (the benchmark's Spec-Bench tasks); `options` are Request's fields from
        `strategy` on; attribution points into `question`."""
        prompt = self.chat_prompt(question, history)
        return self._start(prompt, check_decoding(Request(question, "", **options)), None, cancel)

    def complete(self, text: str, *, cancel: threading.Event | None = None, **options) -> Iterator[Event]:
        """Continue `text` as it stands, without the chat template (a plain completion); `options` are
        Request's fields from `strategy` on; attribution points into `text`."""
        if not isinstance(text, str) or not text:
            raise RewriteError("the prompt is empty")
        prompt = text_prompt(self.loaded.tokenizer, text)
        return self._start(prompt, check_decoding(Request(text, "", **options)), None, cancel)

    def _start(self, prompt: Prompt, request: Request, target: tuple[int, int] | None,
               cancel: threading.Event | None, prefixes: PrefixCache | None = None, more: int = 0,
               rest: tuple[int, int] | None = None, lockstep: Lockstep | None = None) -> Iterator[Event]:
        """One pass: the answer to `prompt`, which rewrites `target` of the request's document (None: a chat turn),
        reusing prompt prefixes from `prefixes` (None: the engine's cache, if it keeps one); unless the request
        sets a limit, it gets `more` new tokens than the budget of a rewrite of `target`. `rest`: the range of a
        definition's body that the answer ends by copying (`OutputText`). With `lockstep`, the pass is decoded
        side by side with the others added to it (a chain's steps: no token tree)."""
        strategy = request.strategy or self.strategy
        room = self.loaded.context_length - len(prompt.ids)
        max_new_tokens = request.max_new_tokens
        if max_new_tokens is None:
            max_new_tokens = self.budget(prompt, request.document[slice(*target)] if target else None, more)
        check_generation(max_new_tokens, room, len(prompt.ids), self.loaded.context_length)
        options = dict(max_new_tokens=max_new_tokens, draft_tokens=request.draft_tokens or self.adaptive_length(),
                       sampling=Sampling(request.temperature, request.top_k, request.top_p, request.seed),
                       eos=self.loaded.eos, prefixes=prefixes if prefixes is not None else self.prefixes)
        drafter = self.drafter(strategy)
        if lockstep is not None:
            def consume(steps: Iterator[Step], clock: Callable[[], float]) -> Iterator[Event]:
                return self._generate(prompt, request, target, steps, cancel, rest, clock)

            start = partial(begin, self.loaded.model, prompt.ids, drafter, **options)
            return self._in_turn(lockstep.add(start, consume, cancel), cancel)
        steps = decode(self.loaded.model, prompt.ids, drafter, cancel=cancel, branches=self.branches, **options)
        return self._in_turn(self._generate(prompt, request, target, steps, cancel, rest), cancel)

    def _in_turn(self, generation: Generator[Event, None, None], cancel: threading.Event | None) -> Iterator[Event]:
        ticket = object()
        try:
            for ahead in self._queue.wait(ticket, cancel):
                yield Queued(ahead)
            yield from self._forwards.steps(generation)
        finally:
            generation.close()
            self._queue.leave(ticket)

    def _generate(self, prompt: Prompt, request: Request, target: tuple[int, int] | None, steps: Iterator[Step],
                  cancel: threading.Event | None, rest: tuple[int, int] | None = None,
                  clock: Callable[[], float] | None = None) -> Generator[Event, None, None]:
        """A pass's events from its decoding `steps`; `clock`: the pass's seconds so far (None: since it started)."""
        document = request.document
        output = OutputText(self.loaded.tokenizer, document, tuple(request.stop), prompt.fence, target, rest)
        positions = list(prompt.sources)  # document span of every context position, output included
        shown: list[Span] = []
        started = time.perf_counter()
        elapsed = clock or (lambda: time.perf_counter() - started)
        first_token = None
        count = drafted = accepted = 0
        stopped = "cancelled" if cancel is not None and cancel.is_set() else "length"

        def totals() -> Stats:
            return Stats(output.tokens, count, elapsed(), len(prompt.ids), drafted, accepted, first_token or 0.0)

        with closing(steps):
            for step in steps:
                count += 1
                drafted, accepted = drafted + step.drafted, accepted + step.accepted
                first_token = first_token or elapsed()
                for source in step.sources:  # a source may be a token accepted earlier in this same step
                    positions.append(None if source is None else positions[source])
                spans = positions[len(positions) - len(step.sources):]
                text, tokens = output.add(step.tokens, spans)
                shown += tokens
                if output.ended:
                    steps.close()  # no more steps: beside other passes, one would be made before this one resumes
                yield Delta(text, tokens, len(step.tokens), step.drafted, step.accepted, step.seconds, totals())
                if output.ended:
                    stopped = output.ended
                    break
                stopped = step.finished or stopped
            if stopped == "length" and cancel is not None and cancel.is_set():
                stopped = "cancelled"
        text, tokens = output.finish()
        shown += tokens
        final = output.text
        newline = missing_final_newline(final, document[slice(*target)] if target else "", stopped == "eos")
        text, final = text + newline, final + newline
        stats = totals()
        if text:
            yield Delta(text, tokens, 0, 0, 0, 0.0, stats)
        yield Result(final, merge_spans(shown), stats, stopped, self.model, self.loaded.weights, shown,
                     [target] if target else [])

    def shown(self, prompt: Prompt, document: str, target: tuple[int, int] | None,
              tokens: list[int]) -> tuple[str, int, bool]:
        """What a pass would show had the model made `tokens` (cut at EOS and where the answer ends, the final
        newline as a rewrite adds it), how many of them it would count, and whether they end the answer: so
        that the bench compares another generator's output exactly."""
        ended = next((i for i, t in enumerate(tokens) if t in self.loaded.eos), None)
        tokens = tokens[:ended]
        output = OutputText(self.loaded.tokenizer, document, fence=prompt.fence, target=target)
        output.add(tokens, [None] * len(tokens))
        output.finish()
        target_text = document[slice(*target)] if target else ""
        newline = missing_final_newline(output.text, target_text, ended is not None or output.ended == "eos")
        return output.text + newline, output.tokens, ended is not None or output.ended is not None


def check_generation(max_new_tokens: int, room: int, prompt_tokens: int, context: int) -> None:
    """The token limit fits what the prompt leaves of the context."""
    if room < 16:
        raise RewriteError(f"the prompt is {prompt_tokens} tokens, too long for the model's context of {context} "
                           f"tokens; rewrite a selection or split the document")
    if not 1 <= max_new_tokens <= room:
        raise RewriteError(f"max_new_tokens must be between 1 and {room} here (the model's context is {context} "
                           f"tokens and the prompt takes {prompt_tokens})")
