"""Several sequences' rows in one forward (`model.side_by_side`): every row gets the bits of a forward of its own
sequence's rows alone, and every cache is left as that forward leaves it."""

from __future__ import annotations

import pytest
import torch

from assistant.decoding import loop
from assistant.model import attention, side_by_side

pytestmark = pytest.mark.usefixtures("one_thread")


def prefilled(model, prompt: list[int]):
    context = loop.start(model, prompt, 200, ())
    loop.prefill(model, prompt[:-1], context, None)
    return context


@pytest.mark.parametrize("kernel", [True, False])
def test_each_sequences_rows_get_the_bits_of_their_own_forward(tiny_model, monkeypatch, kernel):
    """On the attention kernel and on `few_queries`. Each sequence's own forward is padded to the rows of the
    forward together (copies of its last token, after it, cropped after), so that products whose bits depend on
    the count of rows (MKL's float32 with 1 or 2 rows, not our kernels) cannot hide a difference in attention."""
    if not kernel:
        monkeypatch.setattr(attention, "kernel_takes", lambda key, value, kernel: False)
    prompts = [[3, 1, 4, 1, 5] * 9, [2, 7] * 30, [9, 8, 7, 6]]
    fed = [[5, 9, 2], [7], [1, 2, 3, 4, 5, 6]]
    together, apart = [prefilled(tiny_model, p) for p in prompts], [prefilled(tiny_model, p) for p in prompts]
    sequences = side_by_side.Sequences([c.cache for c in together], [len(rows) for rows in fed])
    out = loop.forward(tiny_model, [t for rows in fed for t in rows], sequences, True, sum(sequences.counts))
    first = 0
    for rows, ours, theirs in zip(fed, together, apart):
        padding = sum(sequences.counts) - len(rows)
        alone = loop.forward(tiny_model, rows + rows[-1:] * padding, theirs.cache, True, len(rows) + padding)
        theirs.cache.crop(-padding)
        span = slice(first, first + len(rows))
        first += len(rows)
        assert torch.equal(out.logits[0, span], alone.logits[0, :len(rows)])
        assert all(torch.equal(a[0, span], b[0, :len(rows)]) for a, b in zip(out.hidden_states, alone.hidden_states))
        for mine, other in zip(ours.cache.layers, theirs.cache.layers):
            assert mine.length == other.length
            assert torch.equal(mine.keys, other.keys) and torch.equal(mine.values, other.values)

