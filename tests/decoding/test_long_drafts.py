"""Drafts as long as the copy: past the tuned ceiling while drafts are accepted whole as chosen, back to it
after a miss, never past the rows one forward computes alike, the tokens left or the context's end, and
greedy output still token-identical to plain decoding."""

from __future__ import annotations

import pytest
import torch

from assistant.decoding import loop
from assistant.decoding.draft_length import FLAT, AdaptiveDraftLength
from assistant.decoding.drafters import Context, HiddenDraft, NgramDraft, NoDraft
from assistant.model import exactness

pytestmark = pytest.mark.usefixtures("one_thread")

NEARLY_FLAT = {1: 1.0, 2: 1.02, 4: 1.05, 8: 1.1, 16: 1.2, 32: 1.4, 64: 1.8}  # verification nearly free



def chosen(length: AdaptiveDraftLength, accepted_whole: int) -> list[int]:
    """The drafts chosen while `accepted_whole` drafts in a row are accepted whole."""
    drafts = []
    for _ in range(accepted_whole):
        drafts.append(length.choose())
        length.update(drafts[-1], drafts[-1])
    return drafts


def test_drafts_grow_past_the_ceiling_while_accepted_whole_and_fall_back_after_a_miss():
    length = AdaptiveDraftLength(NEARLY_FLAT, 24, 63)
    assert chosen(length, 4) == [24, 48, 63, 63]  # the ceiling at the prior's acceptance; accepted whole, the reach doubles
    length.update(63, 10)  # the copy ended
    assert length.choose() <= 24
    assert chosen(AdaptiveDraftLength(NEARLY_FLAT, 24), 4) == [24, 24, 24, 24]  # long drafts off: the old ceiling


def test_drafts_stop_growing_where_tokens_per_second_stop_rising():
    steep = {1: 1.0, 2: 1.02, 4: 1.05, 8: 1.1, 16: 1.2, 32: 1.4, 64: 4.0}  # past 32 rows a forward gets dear
    length = AdaptiveDraftLength(steep, 24, 63)
    assert chosen(length, 6) == [24, 31, 31, 31, 31, 31]  # 32 rows: the most tokens per unit of cost
    assert length.reach == 63  # allowed, not worth it


def test_a_step_in_the_cost_curve_below_the_ceiling_does_not_stop_the_growth():
    amx = {1: 1.0, 2: 1.06, 4: 1.2, 8: 1.23, 16: 1.5, 32: 3.15, 64: 5.27}  # the 1.5B's gguf-bf16 on a 2-core AMX Xeon
    length = AdaptiveDraftLength(amx, 24, 63)
    # 16 rows beat 25 within the ceiling; past it, 64 rows beat 16 once the copy is sure enough
    assert chosen(length, 8) == [15] * 2 + [63] * 6


def test_a_draft_cut_short_by_its_source_does_not_grow_the_next():
    length = AdaptiveDraftLength(NEARLY_FLAT, 24, 63)
    assert length.choose() == 24
    length.update(10, 10)  # the source ran out of context, not of agreement
    assert length.choose() == 24 and length.reach == 24


def test_the_longest_draft_is_what_one_forward_computes_alike(tiny_model, monkeypatch):
    assert exactness.longest_draft(tiny_model) == exactness.FEW - 1
    monkeypatch.setattr(exactness, "fixed_shapes", lambda model: True)
    assert exactness.longest_draft(tiny_model) == exactness.STEP_ROWS["cpu"] - 1


class Oracle:
    """Proposes what plain decoding will produce next (known beforehand), so that every draft is accepted
    whole; records each (k, context end, capacity) it is asked with."""

    layers: tuple[int, ...] = ()

    def __init__(self, prompt: list[int], answer: list[int]):
        self.prompt, self.answer, self.asked = prompt, answer, []

    def propose(self, context: Context, k: int) -> tuple[list[int], int]:
        self.asked.append((k, context.n, len(context.tokens)))
        produced = context.n - len(self.prompt)
        draft = self.answer[produced:produced + k] if k > 0 else []
        return draft, (context.n - 2 if draft else -1)


def tokens_of(steps) -> list[int]:
    return [t for s in steps for t in s.tokens]


def plain(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    return tokens_of(loop.decode(model, prompt, NoDraft(), max_new_tokens=max_new_tokens, draft_tokens=0))


def test_accepted_drafts_grow_to_the_longest_and_stay_exact(tiny_model):
    prompt = [3, 9] * 20
    expected = plain(tiny_model, prompt, 200)
    oracle = Oracle(prompt, expected)
    steps = list(loop.decode(tiny_model, prompt, oracle, max_new_tokens=200,
                             draft_tokens=AdaptiveDraftLength(FLAT, 4, 63)))
    assert tokens_of(steps) == expected  # 64-row verifications give one-token steps' tokens
    assert [s.drafted for s in steps][:5] == [4, 8, 16, 32, 63]
    assert all(s.accepted == s.drafted for s in steps)


@pytest.mark.parametrize("max_new_tokens", [1, 2, 30, 61, 64, 65, 100])
def test_long_drafts_are_cut_at_the_tokens_left_and_the_context_end(tiny_model, max_new_tokens):
    prompt = [3, 9] * 20
    expected = plain(tiny_model, prompt, max_new_tokens)
    oracle = Oracle(prompt, expected)
    steps = list(loop.decode(tiny_model, prompt, oracle, max_new_tokens=max_new_tokens,
                             draft_tokens=AdaptiveDraftLength(FLAT, 16, 63)))
    assert tokens_of(steps) == expected and steps[-1].finished == "length"
    produced = 0
    for (k, n, capacity), step in zip(oracle.asked, steps):
        assert k <= max_new_tokens - produced - 1  # never past the token limit
        assert n - 1 + k < capacity  # the step's rows fit the context
        produced += len(step.tokens)


def test_a_ceiling_past_the_rows_alike_is_cut_to_them(tiny_model):
    prompt = [3, 9] * 20
    expected = plain(tiny_model, prompt, 150)
    oracle = Oracle(prompt, expected)
    steps = list(loop.decode(tiny_model, prompt, oracle, max_new_tokens=150, draft_tokens=100))
    assert tokens_of(steps) == expected and max(s.drafted for s in steps) == exactness.FEW - 1


@pytest.mark.parametrize("seed", range(4))
def test_greedy_with_long_drafts_matches_plain_decoding(tiny_model, seed):
    generator = torch.Generator().manual_seed(seed)
    body = torch.randint(0, 20, (30,), generator=generator).tolist()
    for prompt in (body * 4, body + [3, 9] * 30, [5] * 80):
        expected = plain(tiny_model, prompt, 120)
        for drafter in (NgramDraft(), HiddenDraft(1)):
            length = AdaptiveDraftLength(NEARLY_FLAT, 4, 63)
            got = tokens_of(loop.decode(tiny_model, prompt, drafter, max_new_tokens=120, draft_tokens=length))
            assert got == expected


def test_where_shapes_are_fixed_drafts_grow_to_the_step_rows_alone(tiny_model, monkeypatch):
    monkeypatch.setattr(exactness, "fixed_shapes", lambda model: True)
    monkeypatch.setitem(exactness.STEP_ROWS, "cpu", 8)
    prompt = [3, 9] * 20
    expected = plain(tiny_model, prompt, 60)
    oracle = Oracle(prompt, expected)
    length = AdaptiveDraftLength(FLAT, 2, exactness.longest_draft(tiny_model))
    steps = list(loop.decode(tiny_model, prompt, oracle, max_new_tokens=60, draft_tokens=length))
    assert tokens_of(steps) == expected
    assert [s.drafted for s in steps][:4] == [2, 4, 7, 7]  # 8 rows a step: a draft of 7 and its token
