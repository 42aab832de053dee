"""A warm buffer: an idle document's prompt prefix is prefilled at low priority, so the first rewrite of
it skips that prefill, and nothing about the rewrite's output changes."""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import pytest

from assistant.decoding.prefix_cache import PrefixCache, common_prefix
from assistant.engine.assistant import WARM_CHUNK

DOCUMENT = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(12))


@pytest.fixture
def fresh(embedded, monkeypatch):
    monkeypatch.setattr(embedded, "prefixes", PrefixCache(64 << 20))
    return embedded


def test_warming_caches_what_any_instruction_shares_and_changes_no_output(fresh):
    cold = fresh.rewrite_text(DOCUMENT, "Rename f0 to first.", max_new_tokens=24, strategy="pld+h")
    fresh.prefixes.entries.clear()
    cached = fresh.warm(DOCUMENT)
    prompt = fresh.prompt(DOCUMENT, "Rename f0 to first.").ids
    assert cached >= len(fresh.loaded.tokenizer(DOCUMENT)["input_ids"])  # the whole fenced document at least
    [entry] = fresh.prefixes.entries.values()
    assert common_prefix(entry.ids, np.asarray(prompt)) == cached
    warm = fresh.rewrite_text(DOCUMENT, "Rename f0 to first.", max_new_tokens=24, strategy="pld+h")
    assert warm.text == cold.text and warm.token_spans == cold.token_spans


def test_warming_takes_one_turn_per_chunk_and_stops_when_cancelled(fresh, monkeypatch):
    turns = []
    cancel = threading.Event()

    @contextlib.contextmanager
    def turn():
        turns.append(1)
        yield
        if len(turns) == 2:
            cancel.set()  # a request came: the warm-up gives way for good

    monkeypatch.setattr(fresh, "_background_turn", turn)
    cached = fresh.warm(DOCUMENT, cancel)
    assert turns == [1, 1] and cached == 2 * WARM_CHUNK
    assert not fresh.prefixes.entries  # a partial warm-up stores nothing half-made
    turns.clear()
    full = fresh.warm(DOCUMENT)
    assert len(turns) == -(-full // WARM_CHUNK)
