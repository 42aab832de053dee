"""Generations side by side: each makes the steps it makes alone, greedy or sampled, token for token and source for
source, whatever runs beside it, in whatever order they are read; a round keeps the rows that pay for themselves,
within what one forward computes alike; a generation that is read no more, or cancelled, makes no more steps; their
seconds are not counted twice."""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest
import torch

from assistant.decoding import lockstep, loop
from assistant.decoding.drafters import AttentionDraft, HiddenDraft, NgramDraft, NoDraft
from assistant.decoding.draft_length import AdaptiveDraftLength, FixedDraftLength
from assistant.decoding.lockstep import Lockstep, allotted, rows_within
from assistant.decoding.verification import Sampling
from assistant.model import exactness, side_by_side

pytestmark = pytest.mark.usefixtures("one_thread")


def prompts() -> list[list[int]]:
    body = torch.randint(0, 20, (30,), generator=torch.Generator().manual_seed(3)).tolist()
    return [body * 3, body + [3, 9] * 20, [5] * 20 + [5, 6] * 10, body[:7], body[::-1] * 2 + [1]]


def alone(model, prompt: list[int], drafter, max_new_tokens: int, draft_tokens: int,
          sampling: Sampling = Sampling()) -> list[loop.Step]:
    return list(loop.decode(model, prompt, drafter, max_new_tokens=max_new_tokens, draft_tokens=draft_tokens,
                            sampling=sampling))


def steps_of(steps, clock):
    yield from steps


def added(side: Lockstep, model, prompt: list[int], drafter, max_new_tokens: int, draft_tokens: int,
          consume=steps_of, cancel: threading.Event | None = None, sampling: Sampling = Sampling()):
    start = partial(loop.begin, model, prompt, drafter, max_new_tokens=max_new_tokens, draft_tokens=draft_tokens,
                    sampling=sampling)
    return side.add(start, consume, cancel)


@pytest.mark.parametrize("width", [1, 2, 3, 8])
def test_each_generation_makes_the_steps_it_makes_alone(tiny_model, width):
    for drafter in (NoDraft(), NgramDraft(), HiddenDraft(1), AttentionDraft(tiny_model, [(0, 0), (1, 1)])):
        budgets = [60, 17, 45, 3, 80]
        expected = [alone(tiny_model, prompt, drafter, budget, 6) for prompt, budget in zip(prompts(), budgets)]
        side = Lockstep(tiny_model, width)
        outputs = [added(side, tiny_model, prompt, drafter, budget, 6) for prompt, budget in zip(prompts(), budgets)]
        for got, steps in zip(outputs, expected):
            got = list(got)
            assert [s.tokens for s in got] == [s.tokens for s in steps]
            assert [s.sources for s in got] == [s.sources for s in steps]
            assert [s.finished for s in got] == [s.finished for s in steps]


def test_sampled_generations_make_the_tokens_they_make_alone(peaky_model):
    sampling = [Sampling(temperature=0.8, seed=seed) for seed in range(len(prompts()))]
    expected = [alone(peaky_model, prompt, NgramDraft(), 40, 6, s) for prompt, s in zip(prompts(), sampling)]
    side = Lockstep(peaky_model, 3)
    outputs = [added(side, peaky_model, prompt, NgramDraft(), 40, 6, sampling=s)
               for prompt, s in zip(prompts(), sampling)]
    assert [[s.tokens for s in got] for got in outputs] == [[s.tokens for s in steps] for steps in expected]


def test_generations_read_in_another_order_join_as_they_are_read(tiny_model):
    expected = [alone(tiny_model, prompt, NgramDraft(), 40, 6) for prompt in prompts()]
    side = Lockstep(tiny_model, 2)
    outputs = [added(side, tiny_model, prompt, NgramDraft(), 40, 6) for prompt in prompts()]
    for index in (3, 0, 4, 2, 1):
        assert [s.tokens for s in outputs[index]] == [s.tokens for s in expected[index]]


def test_a_rounds_rows_stay_within_what_one_forward_computes_alike(tiny_model, monkeypatch):
    counts, forward = [], side_by_side.Sequences.attend

    def recorded(self, *args):
        counts.append(sum(self.counts))
        return forward(self, *args)

    monkeypatch.setattr(side_by_side.Sequences, "attend", recorded)
    copy = prompts()[0]
    expected = alone(tiny_model, copy, NgramDraft(), 120, 40)
    side = Lockstep(tiny_model, 4)
    outputs = [added(side, tiny_model, copy, NgramDraft(), 120, 40) for _ in range(4)]
    assert all([s.tokens for s in got] == [s.tokens for s in expected] for got in outputs)
    assert max(counts) == exactness.FEW  # long drafts, cut to the rows one forward takes


def test_drafts_are_cut_from_their_ends_the_longest_first():
    drafts = [([1, 2, 3, 4, 5], 7), ([6], 2), ([8, 9, 10], 4)]
    assert rows_within(drafts, 8) == [([1, 2], 7), ([6], 2), ([8, 9], 4)]
    assert rows_within(drafts, 3) == [([], 7), ([], 2), ([], 4)]
    assert rows_within(drafts, 64) == drafts


def adaptive(costs: dict[int, float], acceptance: float) -> AdaptiveDraftLength:
    length = AdaptiveDraftLength(costs, 24, 63)
    length.acceptance = acceptance
    return length


def test_a_round_keeps_the_rows_that_make_the_most_tokens_for_their_cost():
    step = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0, 32: 2.0, 64: 4.0}  # 17 rows cost what 32 do (AMX tiles)
    step[17] = 2.0
    drafts = [(list(range(10)), 0), (list(range(10)), 1), ([], 2), ([], 3)]
    doubtful = allotted(drafts, [adaptive(step, 0.6), adaptive(step, 0.6), adaptive(step, 0.9), adaptive(step, 0.9)],
                        64)
    assert sum(len(d) + 1 for d, _ in doubtful) == 16  # 24 rows would cost twice 16
    assert [len(d) for d, _ in doubtful] == [6, 6, 0, 0]
    flat = {n: 1.0 for n in (1, 2, 4, 8, 16, 32, 64)}
    assert allotted(drafts, [adaptive(flat, 0.6)] * 4, 64) == drafts  # rows cost nothing: every draft whole
    assert sum(len(d) + 1 for d, _ in allotted(drafts, [adaptive(flat, 0.99)] * 4, 16)) == 16
    fixed = [FixedDraftLength(10)] * 4
    assert allotted(drafts, fixed, 64) == drafts and allotted(drafts, fixed, 8) == rows_within(drafts, 8)


def test_a_generation_whose_consumer_closes_its_steps_makes_no_more(tiny_model, monkeypatch):
    made = {}
    settled = lockstep.settled

    def counted(generation, *args):
        made[id(generation)] = made.get(id(generation), 0) + 1
        return settled(generation, *args)

    monkeypatch.setattr(lockstep, "settled", counted)

    def three(steps, clock):
        for count, step in enumerate(steps, 1):
            if count == 3:
                steps.close()  # as an answer that reached its end does, before it hands the step on
            yield step

    side = Lockstep(tiny_model, 3)
    short = added(side, tiny_model, prompts()[1], NoDraft(), 50, 0, three)
    long = added(side, tiny_model, prompts()[0], NoDraft(), 50, 0)
    assert len(list(long)) == 50
    assert len(list(short)) == 3
    assert sorted(made.values()) == [3, 50]


def test_a_cancelled_generation_is_never_started_and_one_cancelled_while_running_stops(tiny_model):
    cancelled, stopping = threading.Event(), threading.Event()
    cancelled.set()
    side = Lockstep(tiny_model, 4)

    def stop_after_two(steps, clock):
        for count, step in enumerate(steps, 1):
            yield step
            if count == 2:
                stopping.set()

    never = added(side, tiny_model, prompts()[0], NoDraft(), 30, 0, cancel=cancelled)
    stopped = added(side, tiny_model, prompts()[1], NoDraft(), 30, 0, stop_after_two, stopping)
    other = added(side, tiny_model, prompts()[2], NoDraft(), 30, 0)
    assert list(never) == []
    assert len(list(stopped)) == 2
    assert len(list(other)) == 30


def test_seconds_are_shared_so_that_the_generations_add_up_to_the_time_taken(tiny_model):
    clocks = []

    def timed(steps, clock):
        for step in steps:
            yield step
        clocks.append(clock())

    side = Lockstep(tiny_model, 3)
    outputs = [added(side, tiny_model, prompt, NoDraft(), 20, 0, timed) for prompt in prompts()[:3]]
    started = time.perf_counter()
    for output in outputs:
        list(output)
    assert 0 < sum(clocks) <= time.perf_counter() - started
